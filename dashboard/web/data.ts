// What the page reads: dashboard/api.ts's answers (JSON: dates are strings), and the reads.
import type { LrRow, MetricRow, StepTime } from './curves';

export interface RunSummary {
  runId: string;
  team: string;
  status: string;
  step: number;
  steps: number | null;
  evalSuccess: number | null;
  evalStep: number | null;
  startedAt: string;
  durationSeconds: number;
}
/** What episode retention pruned of a run (activities/store/episode-retention.ts). */
export interface RunRetention {
  trainEpisodes: number;
  turns: number;
  gatewayCalls: number;
  policy: string;
  lastPrunedAt: string;
}
/** An agent without a learning signal for its last steps (activities/store/stalled-agents.ts). */
export interface StalledAgent {
  agent: string;
  model: string;
  since: number;
  steps: number;
  reward: number;
  firstReward: number;
}
export interface RunEvent {
  step: number;
  kind: string;
  at: string;
  detail: unknown;
}
export interface EpisodeRow {
  episodeId: string;
  taskId: string;
  groupIndex: number;
  episodeIndex: number;
  status: string;
  success: number | null;
  reward: number | null;
  turns: number;
  error: string | null;
}
export interface Turn {
  index: number;
  agent: string;
  model: string;
  version: number;
  parents: number[];
  stopReason: string;
  advantage: number | null;
  toolCalls: { tool: string; input: unknown; output: unknown; error?: string }[];
  contextText: string[] | null;
  contextTokens: number[];
  responseText: string[] | null;
  responseTokens: number[];
  logprobs: number[];
  lossMask: number[];
}
export interface TurnRewards {
  turn: number;
  components: Record<string, number>;
  /** The components that reward this turn itself (the reward function's `turn` part). */
  perTurn?: string[];
}
export interface GraphNode {
  id: string;
  agent: string;
  kind: string;
  label: string;
}
export interface GraphEdge {
  from: string;
  to: string;
  kind: string;
}
export interface Episode {
  runId: string;
  step: number;
  taskId: string;
  /** The task as the team's task source gave it, and what the episode function returned. */
  task: unknown;
  outcome: unknown;
  split: string;
  status: string;
  success: number | null;
  seed: number;
  error: string | null;
  decodeError: string | null;
  rewards: TurnRewards[];
  turns: Turn[];
  graph: { nodes: GraphNode[]; edges: GraphEdge[] };
}

export async function api<T>(path: string): Promise<T> {
  const res = await fetch(path);
  const body = (await res.json()) as T & { error?: string };
  if (!res.ok) throw new Error(body.error ?? `${res.status}`);
  return body;
}

let configPromise: Promise<{ temporalUiUrl: string | null; namespace: string; temporalAddress: string | null; controls: boolean }> | undefined;
export const config = () => (configPromise ??= api('/api/config'));
export const temporalLink = async (runId: string) => {
  const c = await config();
  return c.temporalUiUrl ? `${c.temporalUiUrl}/namespaces/${encodeURIComponent(c.namespace)}/workflows/${encodeURIComponent(runId)}` : null;
};

/** Every metric row of a run from `fromStep` on, page by page, and the learning rates. */
export async function fetchRunMetrics(runId: string, fromStep: number): Promise<{ rows: MetricRow[]; lr: LrRow[]; stepTimes: StepTime[] }> {
  const rows: MetricRow[] = [];
  let lr: LrRow[] = [];
  let stepTimes: StepTime[] = [];
  for (let offset: number | null = 0; offset !== null;) {
    const page: { metrics: MetricRow[]; lr: LrRow[]; stepTimes: StepTime[]; nextOffset: number | null } = await api(
      `/api/runs/${encodeURIComponent(runId)}/metrics?fromStep=${fromStep}&limit=20000&offset=${offset}`,
    );
    rows.push(...page.metrics);
    if (offset === 0) ({ lr, stepTimes } = page);
    offset = page.nextOffset;
  }
  return { rows, lr, stepTimes };
}

/** GET /api/pipelines/:id: its stages (the workflow's status query) and their runs as stored. */
export interface PipelineView {
  pipelineId: string;
  name: string;
  status: string;
  stages: Array<{
    name: string;
    after: string[];
    runId: string;
    state: string;
    steps?: number;
    export?: { model: string; version: number; out: string };
    error?: string;
  }>;
  runs: RunSummary[];
}
