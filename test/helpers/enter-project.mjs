// Loaded by the test runner (tools/test.js: `node --import tsx --import ./test/helpers/enter-project.mjs`)
// into every test process. Node passes --import to worker threads too (Temporal runs workflows on
// them): only the main thread enters the project.
import { isMainThread } from 'node:worker_threads';

if (isMainThread) await import('./project.ts');
