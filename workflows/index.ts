// All workflows registered on the control worker (workflowsPath points here).
// Workflow code only: deterministic, no Node APIs. Add one export line per file.
export * from './ping';
export * from './episode';
export * from './rollout-node';
export * from './training-run';
export * from './pipeline';
