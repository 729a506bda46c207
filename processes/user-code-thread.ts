/**
 * A control worker's user code thread (activities/training/user-code-threads.ts): loads teams as
 * the worker does and runs the durable episodes' tool calls and scoring it is handed.
 */
import { parentPort } from 'node:worker_threads';
import { readCheckpointTokenizers } from '../activities/training/pretrained';
import { serveUserCode } from '../activities/training/user-code-threads';
import { loadTeam } from '../agents/team-registry';
import { enterProjectFromEnvironment } from './project';

// the worker's project, found as the worker found it (TROUPE_PROJECT, or above the working directory): its teams
enterProjectFromEnvironment({ required: false });
readCheckpointTokenizers();
serveUserCode(parentPort!, (ref) => loadTeam(ref.team, ref.teamOptions));
