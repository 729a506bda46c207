// trainingRun (workflow.ts reads top to bottom): the run's state (state.ts), its named steps
// (steps.ts), rollouts (rollout.ts), asynchronous runs (stale.ts), config resolution
// (resolve.ts), Current Details (details.ts) and the activities it calls (activities.ts).
export { trainingRun, type RunSummary, type StartMode } from './workflow';
export type { Carried } from './state';
