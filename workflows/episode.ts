/**
 * One episode as durable work: the team's episode function runs here, each
 * agent turn's generation is an activity on its model's pool queue and each
 * tool call an activity on the control queue. A crash of any worker loses at
 * most the activity in flight, which is retried with the same seed.
 */
import { proxyActivities, proxyLocalActivities } from '@temporalio/workflow';
import type { Sampling } from '../agents/agent';
import { runEpisode, type EpisodeIO, type GenerateCall } from '../agents/episode';
import type { Split } from '../agents/tasks';
import { loadTeam } from '../agents/team-registry';
import type { TrainingControlActivities, TeamRef } from '../activities/training/control';
import { durableEpisodeMeta, type EpisodeSpec, type StepPlan } from '../activities/training/plan';
import type { TrainingPoolActivities } from '../activities/training/pool';
import { controlActivities, controlLocalActivities, toolActivities, turnActivities } from './timeouts';

/** What every episode of a workflow shares: the team, the run's step, the versions it samples and where. */
export type EpisodeIOInput = TeamRef & {
  runId: string;
  step: number;
  split: Split;
  versions: Record<string, number>;
  sampling?: Partial<Sampling>;
  /** pool name -> task queue (from the parent run); absent in runs that predate it: the pool's name */
  poolQueues?: Record<string, string>;
  /** model -> task queue of its sampling pool, where the run or team moved it off the team's `pool` */
  modelQueues?: Record<string, string>;
  /** Score and store the episode by a local activity (set by runs with the local-record-episode patch). */
  recordLocally?: boolean;
};

export type EpisodeWorkflowInput = EpisodeIOInput &
  // The episode by reference (its plan and index), looked up by a local activity, or
  // listed in full (episodes started before plans were references).
  ({ plan: Omit<StepPlan, 'episodes'>; index: number } | { spec: EpisodeSpec });

const control = proxyActivities<TrainingControlActivities>(controlActivities);
const controlLocal = proxyLocalActivities<TrainingControlActivities>(controlLocalActivities);

/** What an episode's workflow says of it; turns and error feed the run's progress (its failures' most common error) without reading the store. */
export type EpisodeOutcome = { episodeId: string; status: string; success: boolean | null; turns: number; error?: string };

export async function episodeWorkflow(input: EpisodeWorkflowInput): Promise<EpisodeOutcome> {
  const play = episodePlayer(input);
  return play('spec' in input ? input.spec : { plan: input.plan, index: input.index });
}

/**
 * Plays episodes of one workflow: the team is loaded and the activity proxies made once, then each
 * call runs one episode (looked up by its plan and index, or given in full), scores and stores it.
 */
export function episodePlayer(input: EpisodeIOInput): (episode: EpisodeSpec | { plan: Omit<StepPlan, 'episodes'>; index: number }) => Promise<EpisodeOutcome> {
  // Local: one workflow task and one task-queue round trip fewer per episode, and the trajectory stays
  // out of the history (a local activity's input is not recorded); recordEpisode is idempotent. The
  // run decides (patch local-record-episode) and says so in the input: a patch here would add a marker
  // and a search-attribute upsert to every episode's history.
  const record = input.recordLocally ? controlLocal : control;
  const team = loadTeam(input.team, input.teamOptions);
  const ref: TeamRef = { team: input.team, teamOptions: input.teamOptions };
  const tools = proxyActivities<TrainingControlActivities>(
    toolActivities(Math.max(0, ...Object.values(team.agents).flatMap((a) => a.tools.map((t) => t.timeoutMs)))),
  );
  const pools = new Map<string, TrainingPoolActivities>();
  const pool = (model: string) => {
    const name = team.models[model]!.pool;
    const queue = input.modelQueues?.[model] ?? input.poolQueues?.[name] ?? name;
    let p = pools.get(queue);
    if (!p) {
      p = proxyActivities<TrainingPoolActivities>(turnActivities(queue));
      pools.set(queue, p);
    }
    return p;
  };
  const io: EpisodeIO = {
    generate: (call: GenerateCall) => pool(call.model).generateTurn({ runId: input.runId, ...ref, call }),
    callTool: (req) => tools.callTool({ ...ref, req }),
    now: () => Date.now(),
  };
  return async (episode) => {
    const spec = 'episodeId' in episode ? episode : await controlLocal.episodeSpec({ ...ref, plan: episode.plan, index: episode.index });
    const trajectory = await runEpisode(
      team,
      { episodeId: spec.episodeId, seed: spec.seed, task: spec.task, versions: input.versions, sampling: input.sampling },
      io,
    );
    const recorded = await record.recordEpisode({ ...ref, meta: durableEpisodeMeta(spec, input), trajectory });
    return { ...recorded, turns: trajectory.turns.length, ...(trajectory.error === undefined ? {} : { error: trajectory.error }) };
  };
}

/** What every episode of a rollout's workflows gets: the plan they index into, by reference. */
export type PlannedEpisodesInput = EpisodeIOInput & { plan: Omit<StepPlan, 'episodes'> };

/**
 * The plan's episodes [from, to) in one workflow (run setting episodesPerWorkflow): each plays as its
 * own episode workflow would, concurrently, with its turns and tool calls as this workflow's activities,
 * so a crash repeats no completed turn and every episode keeps its id and its single record. One workflow
 * start, and workflow tasks shared by the episodes' concurrent turns, in place of one per episode.
 */
export async function episodeGroupWorkflow(input: { episodes: PlannedEpisodesInput; from: number; to: number }): Promise<EpisodeOutcome[]> {
  const play = episodePlayer(input.episodes);
  const { plan } = input.episodes;
  return Promise.all(Array.from({ length: input.to - input.from }, (_, i) => play({ plan, index: input.from + i })));
}
