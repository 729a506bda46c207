/**
 * A pool worker's episode thread (activities/training/episode-threads.ts): loads teams as the
 * worker does and runs the batched episodes it is handed.
 */
import { workerData, type MessagePort } from 'node:worker_threads';
import { serveEpisodes } from '../activities/training/episode-threads';
import { readCheckpointTokenizers } from '../activities/training/pretrained';
import { loadTeam } from '../agents/team-registry';
import { enterProjectFromEnvironment } from './project';

const { port, shared } = workerData as { port: MessagePort; shared: Int32Array };
// the worker's project (TROUPE_PROJECT, inherited with its environment): its teams and estimators
enterProjectFromEnvironment({ required: false });
readCheckpointTokenizers();
serveEpisodes(port, shared, (ref) => loadTeam(ref.team, ref.teamOptions));
