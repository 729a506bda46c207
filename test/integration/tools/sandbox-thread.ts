/**
 * A user-code thread serving one team with a sandbox tool, as processes/user-code-thread.ts
 * wires the worker's threads (sandbox.test.ts runs calls through it).
 */
import { parentPort } from 'node:worker_threads';
import { sandboxTool } from '../../../agents/sandbox-tool';
import type { AnyTeam } from '../../../agents/team';
import { serveUserCode } from '../../../activities/training/user-code-threads';

const tool = sandboxTool({ limits: { wallMs: 1_000 } });
const team = { agents: { coder: { tools: [tool] } } } as unknown as AnyTeam;
if (parentPort) serveUserCode(parentPort, () => team);
