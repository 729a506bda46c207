/**
 * A partial-rollout step's metrics (workflows/training-run/steps.ts, team rows) as
 * [panel, series]: the dashboard's run page (dashboard/web/curves.ts) and the curves plot
 * (store/plot.ts: `troupe plot`, the MLflow export) draw the same panels from this one table.
 * Below both, and without imports, so the page's bundle can take it; stack/install.js watches
 * it with the page's sources, so a change rebuilds the page.
 */
export const PARTIAL_PANELS: Record<string, [panel: string, series: string]> = {
  'partial.carriedEpisodes': ['carried into the next step', 'episodes'],
  'partial.carriedGroups': ['carried into the next step', 'groups'],
  'partial.carriedMaxAge': ["carried episodes' age (steps)", 'oldest'],
  'partial.trainedMaxAge': ["carried episodes' age (steps)", 'oldest trained'],
  'partial.generatedTokens': ['rollout tokens (sampled / served from the store)', 'sampled'],
  'partial.replayedTokens': ['rollout tokens (sampled / served from the store)', 'served from the store'],
  'partial.groups': ['partial rollout: groups run and lockstep rounds', 'groups'],
  'partial.rounds': ['partial rollout: groups run and lockstep rounds', 'rounds'],
  'partial.heldGroups': ['partial rollout: groups run and lockstep rounds', 'held at maxCarrySteps'],
};
