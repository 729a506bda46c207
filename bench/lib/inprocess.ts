/**
 * The training job as a plain in-process loop: no Temporal, no Postgres.
 *
 * It calls the same code a Troupe run calls, in the same order and with the
 * same seeds, so with the same config it produces the same tokens, the same
 * advantages and bit-identical updates (the orchestration bench checks that
 * the gradient norms match):
 *
 *   plan      planTrainEpisodes / planEvalEpisodes      (activities/training/plan.ts)
 *   rollout   runEpisode against the engine (EngineClient.generate, as
 *             generateDirect in activities/training/pool.ts), tools via executeTool
 *   reward    scoredEpisode (activities/training/control.ts), minus the store
 *   advantage buildStepBatch on in-memory StoredEpisode objects
 *   update    one engine Update per model, in parallel, prepared as updateModel
 *             prepares it (activities/training/update-step.ts)
 *
 * What it leaves out is exactly what Troupe adds: workflow and activity
 * round trips, heartbeats, Postgres writes and reads of episodes, exporting and
 * storing every version, metrics rows.
 */
import type { Sampling } from '../../agents/agent';
import { runEpisode, type EpisodeIO, type GenerateCall, type GenerateReply } from '../../agents/episode';
import { engineSpec } from '../../agents/model';
import { deriveSeed } from '../../agents/seed';
import { episodeEnded } from '../../agents/tool';
import type { Split } from '../../agents/tasks';
import { loadTeam } from '../../agents/team-registry';
import { enterProjectFromEnvironment } from '../../processes/project';
import { buildStepBatch } from '../../activities/training/batch';
import { scoredEpisode } from '../../activities/training/control';
import { planEvalEpisodes, planTrainEpisodes, type EpisodeSpec } from '../../activities/training/plan';
import { generateOne, type EngineApi } from '../../activities/training/pool';
import { modelKey, needsReference, scoreRequest, skipReason, updateRequest, updateSamples } from '../../activities/training/update-step';
import type { StoredEpisode } from '../../activities/store/trajectories';
import { loadTasks } from '../../activities/tasks';
import { executeTool, failRunOn } from '../../activities/tools';
import { checkAgainstTeam, parseRunConfig, withTeamRunDefaults, type RunConfigInput } from '../../schema/run-config';
import { openGatewaySessions } from '../../gateway';

// A benchmark is a process of its own: it enters its project first, as every Troupe process does
// (in a checkout: the examples project), so teams load by name.
enterProjectFromEnvironment({ required: false });

export interface InProcessStep {
  step: number;
  /** wall seconds of the whole step and of each phase */
  seconds: number;
  phases: { plan: number; rollout: number; reward: number; advantage: number; update: number };
  /** agent turns and generate calls in the step */
  turns: number;
  generates: number;
  toolCalls: number;
  gradNorm: Record<string, number>;
  /** mean reward components per agent */
  rewards: Record<string, Record<string, number>>;
  /** policy entropy per agent (StepBatch.entropy) */
  entropy: Record<string, number>;
  /** per agent, the fraction of task groups that gave it no learning signal */
  zeroAdvantage: Record<string, number>;
  /** per agent, how often each decoded response (tool output included) was sampled */
  replies: Record<string, Record<string, number>>;
}

export interface InProcessOptions {
  /**
   * 'troupe' (default): advantages exactly as a Troupe run computes them (buildStepBatch).
   * 'global-joint': the global baseline Dr. MAS (langfengQ/DrMAS) compares against — every agent's samples of a
   * task group in one statistics set, each sample carrying its episode's average score over
   * all agents' turns — built independently of how buildStepBatch groups roles: every turn
   * is relabelled to one pseudo-agent first, so the estimator sees one role. bench/drmas.ts
   * checks Troupe's `scope: 'group'` against it.
   * Needs every agent to have the same estimator settings.
   */
  advantages?: 'troupe' | 'global-joint';
  onStep?: (s: InProcessStep) => void;
}

export interface InProcessResult {
  runId: string;
  wallSeconds: number;
  steps: InProcessStep[];
  /** greedy eval success, and the greedy responses per agent as in InProcessStep.replies */
  evals: Array<{ step: number; success: number; episodes: number; replies: Record<string, Record<string, number>> }>;
}

const GREEDY: Partial<Sampling> = { temperature: 0 };

export async function trainInProcess(engine: EngineApi, input: RunConfigInput & { runId: string }, hooks: InProcessOptions = {}): Promise<InProcessResult> {
  const t0 = performance.now();
  const parsed = parseRunConfig(input);
  const runId = input.runId;
  const team = loadTeam(parsed.team, parsed.teamOptions);
  const config = parseRunConfig(withTeamRunDefaults(input, team));
  const settings = checkAgainstTeam(config, team);
  const tasks = loadTasks(team);
  const models = Object.keys(team.models);

  // version 0 of each model, from the run seed (as initModel, without storing it)
  const versions: Record<string, number> = {};
  await Promise.all(
    models.map(async (m) => {
      await engine.initModel({ modelKey: modelKey(runId, m), spec: engineSpec(team.models[m]!), seed: deriveSeed(config.seed, 'init', m) });
      versions[m] = 0;
    }),
  );

  const counters = { generates: 0, toolCalls: 0 };
  const io: EpisodeIO = {
    generate: async (call: GenerateCall): Promise<GenerateReply> => {
      counters.generates++;
      return generateOne(engine, runId, call);
    },
    callTool: async (req) => {
      counters.toolCalls++;
      return failRunOn(await executeTool(team, req)); // a tool whose team says so fails the run, as in a rollout
    },
    now: () => Date.now(),
    // gateway teams (agent code on an OpenAI client) get their sessions as a batched rollout gives them
    openSessions: openGatewaySessions,
  };

  /** Rollout, then scoring, of a list of episodes; all in flight at once, as rolloutBatch does. */
  async function rollout(specs: EpisodeSpec[], step: number, split: Split, sampling?: Partial<Sampling>) {
    const a = performance.now();
    const trajectories = await Promise.all(
      // each episode's tools of scope 'episode' end with it, as on an episode thread
      specs.map((spec) =>
        runEpisode(team, { episodeId: spec.episodeId, seed: spec.seed, task: spec.task, versions, sampling }, io).finally(() => episodeEnded(spec.episodeId)),
      ),
    );
    const b = performance.now();
    const episodes = specs.map((spec, i) => scoredEpisode(team, { ...spec, runId, step, split, mode: 'batched' }, trajectories[i]!));
    const c = performance.now();
    return { episodes, rolloutSeconds: (b - a) / 1000, rewardSeconds: (c - b) / 1000 };
  }

  const evals: InProcessResult['evals'] = [];
  async function evaluate(at: number) {
    const specs = planEvalEpisodes(tasks, { runId, step: at, seed: config.seed, count: config.evalTasks });
    const { episodes } = await rollout(specs, at, 'eval', GREEDY);
    const solved = episodes.filter((e) => e.success === true).length;
    evals.push({ step: at, success: episodes.length === 0 ? 0 : solved / episodes.length, episodes: episodes.length, replies: replyCounts(episodes) });
  }

  /** Counts of each agent's decoded responses, to see what a role actually says. */
  function replyCounts(episodes: StoredEpisode[]) {
    const out: Record<string, Record<string, number>> = {};
    for (const e of episodes)
      for (const t of e.trajectory.turns) {
        const text = team.tokenizer.decode(t.responseTokens);
        const byAgent = (out[t.agent] ??= {});
        byAgent[text] = (byAgent[text] ?? 0) + 1;
      }
    return out;
  }

  await evaluate(0);
  const steps: InProcessStep[] = [];
  for (let step = 0; step < config.steps; step++) {
    const s0 = performance.now();
    counters.generates = 0;
    counters.toolCalls = 0;
    const specs = planTrainEpisodes(tasks, { runId, step, seed: config.seed, groupsPerStep: config.groupsPerStep, groupSize: config.groupSize });
    const s1 = performance.now();
    const { episodes, rolloutSeconds, rewardSeconds } = await rollout(specs, step, 'train');
    const s2 = performance.now();
    const batch = hooks.advantages === 'global-joint' ? jointBatch(episodes, settings) : buildStepBatch(episodes, settings);
    const s3 = performance.now();
    const gradNorm: Record<string, number> = {};
    await Promise.all(
      models.map(async (model) => {
        const sequences = batch.models[model] ?? [];
        if (skipReason(sequences)) return;
        const s = settings.models[model]!;
        const ref = needsReference(s) ? await engine.score(scoreRequest(modelKey(runId, model), 0, sequences)) : undefined;
        const samples = updateSamples(
          sequences,
          ref?.sequences.map((q) => q.logprobs),
        );
        const res = await engine.update(updateRequest({ runId, model, step, baseVersion: versions[model]! }, samples, s));
        versions[model] = res.info.version;
        gradNorm[model] = res.metrics.gradNorm;
      }),
    );
    const s4 = performance.now();
    const turns = episodes.reduce((n, e) => n + e.trajectory.turns.length, 0);
    const record: InProcessStep = {
      step,
      seconds: (s4 - s0) / 1000,
      phases: { plan: (s1 - s0) / 1000, rollout: rolloutSeconds, reward: rewardSeconds, advantage: (s3 - s2) / 1000, update: (s4 - s3) / 1000 },
      turns,
      generates: counters.generates,
      toolCalls: counters.toolCalls,
      gradNorm,
      rewards: meanRewards(episodes),
      entropy: batch.entropy,
      replies: replyCounts(episodes),
      zeroAdvantage: Object.fromEntries(Object.entries(batch.diagnostics).map(([a, d]) => [a, d.zeroAdvantageGroupFraction])),
    };
    steps.push(record);
    hooks.onStep?.(record);
    if (config.evalEvery > 0 && (step + 1) % config.evalEvery === 0 && step + 1 < config.steps) await evaluate(step + 1);
  }
  await evaluate(config.steps);
  return { runId, wallSeconds: (performance.now() - t0) / 1000, steps, evals };
}

const JOINT = '*';

/** buildStepBatch with every turn relabelled to one pseudo-agent: one estimator call over all agents' samples. */
function jointBatch(episodes: StoredEpisode[], settings: ReturnType<typeof checkAgainstTeam>) {
  const specs = Object.values(settings.agents);
  const key = (x: (typeof specs)[number]) => JSON.stringify({ e: x.estimator, w: x.rewardWeights });
  if (specs.some((x) => key(x) !== key(specs[0]!))) throw new Error('global-joint advantages need the same estimator settings for every agent');
  const relabelled = episodes.map((e) => ({
    ...e,
    trajectory: { ...e.trajectory, turns: e.trajectory.turns.map((t) => ({ ...t, agent: JOINT })) },
    rewards: e.rewards.map((r) => ({ ...r, agent: JOINT })),
  }));
  return buildStepBatch(relabelled, { models: settings.models, agents: { [JOINT]: specs[0]! } });
}

/** Mean of each reward component per agent over its turns in non-failed episodes (as StepBatch.rewards). */
function meanRewards(episodes: StoredEpisode[]): Record<string, Record<string, number>> {
  const sums: Record<string, Record<string, { s: number; n: number }>> = {};
  for (const e of episodes) {
    if (e.trajectory.status === 'failed') continue;
    for (const r of e.rewards)
      for (const [k, v] of Object.entries(r.components)) {
        const c = ((sums[r.agent] ??= {})[k] ??= { s: 0, n: 0 });
        c.s += v;
        c.n++;
      }
  }
  return Object.fromEntries(Object.entries(sums).map(([a, cs]) => [a, Object.fromEntries(Object.entries(cs).map(([k, c]) => [k, c.s / c.n]))]));
}
