#!/usr/bin/env node
'use strict';
// `npx troupe ...` — plain JavaScript with no dependencies, so it works in a fresh
// clone: installs packages first if node_modules is missing or stale (and generates the
// engine protocol's types and builds the dashboard's page if those are), then loads the TypeScript CLI through tsx.
// Installed as a package (in a project's node_modules) all of that came in the tarball; only the
// engine's runtime, onnxruntime-node, may need installing (stack/install.js ensureOnnxRuntime).
const path = require('node:path');

const repoRoot = path.resolve(__dirname, '..');
const install = require('../stack/install.js');
if (install.isSourceCheckout(repoRoot)) {
  install.ensurePackages(repoRoot);
  install.ensureProtocolTypes(repoRoot);
  install.ensureDashboardBuild(repoRoot);
} else if (process.argv[2] !== 'init') install.ensureOnnxRuntime(repoRoot);
// TypeScript through require() (CommonJS). Dynamic import() of a .ts file is not covered here:
// load TypeScript modules with static imports or require().
require('tsx/cjs');
require('./main.ts').run(process.argv.slice(2));
