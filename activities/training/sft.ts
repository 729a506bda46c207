/**
 * The supervised stage (run config `sft`; docs/running.md, "Supervised fine-tuning (SFT)"): a step
 * trains each trained model on a seeded batch of stored agent turns, by cross-entropy on their
 * response tokens, instead of on a rollout.
 *
 *   loadSftDataset   the source run's turns that pass the filter, in a stable order (sftTurns),
 *                    or a JSONL file's conversations rendered as episodes render turns (jsonlTurns)
 *   sftSelection     the step's batch: `batch` turns drawn without replacement from (run seed, step)
 *   sftStepBatch     the batch as the update's sequences per model (the run's loss masks and aggregation)
 *   withBaseLogprobs the base version's Score as the sequences' old log-probs
 *   sftRows          the step's cross-entropy per agent and model (metric rows: the curves)
 *
 * The loss, with no engine change: the engines' Update minimises Σ_t w_t·L_pg,t with
 * L_pg = max(−A·r, −A·clip(r, 1 − ε_low, 1 + ε_high)) and r = exp(logp − logp_old)
 * (rl/loss-reference.ts). With logp_old the update's base version's own log-probs of the tokens
 * (an engine Score at the base version), A = 1 on every trained token and one optimizer step on
 * the whole batch (innerSteps 1), r = 1 at the weights the gradient is taken at, the clip is
 * inactive (1 is inside [1 − ε_low, 1 + ε_high]; with A > 0 the unclipped branch is the max when
 * they tie), and ∂L_pg/∂logp = −A·r = −1: the gradient is Σ_t w_t·(−∇logp_t), the gradient of the
 * cross-entropy −Σ_t w_t·logp_t with the run's aggregation weights (token mean per model by default).
 * test/unit/training/sft.test.ts checks it against the reference loss by finite differences. A KL
 * term or an entropy bonus the run's optimizer settings turn on is added as in an RL step.
 */
import * as fs from 'node:fs';
import { ApplicationFailure } from '@temporalio/common';
import type { ChatMessage } from '../../agents/chat-template';
import type { AnyTeam } from '../../agents/team';
import { loadTeam } from '../../agents/team-registry';
import { deriveSeed, seededRandom } from '../../agents/seed';
import type { Tokenizer } from '../../agents/tokenizer';
import type { Sql } from '../../infra/db';
import { canonical } from '../../gateway/journal';
import { aggregationWeights } from '../../rl';
import type { OptimizerSettings } from '../../schema/optimizer';
import { trainedModels, type RunConfig, type SftSetting } from '../../schema/run-config';
import type { StepRow } from './update-step';
import type { StepBatch, UpdateSequence } from './batch';
import { getRun } from '../store/runs';
import { loadEpisodes, type StoredEpisode } from '../store/trajectories';
import { InitSourceError } from './init-from';

export type SftSource = NonNullable<SftSetting['from']>;
/** What of a run config the dataset depends on. */
export type SftOf = Pick<RunConfig, 'sft' | 'frozen'>;

/** One turn of the dataset: its agent, the tokens it saw and wrote, and which of them it trains (its loss mask as stored). */
export interface SftTurn {
  /** `<episode id>#<turn index>` */
  id: string;
  agent: string;
  context: number[];
  tokens: number[];
  mask: number[];
}

/** The sum of the reward components a turn's role gave it (0 without any). */
export function turnReward(e: Pick<StoredEpisode, 'rewards'>, turn: number): number {
  const r = e.rewards.find((x) => x.turn === turn);
  return Object.values(r?.components ?? {}).reduce((a, b) => a + b, 0);
}

/**
 * The turns of `episodes` that pass the filter, in (step, group, episode, turn) order: failed episodes never,
 * truncated ones only with completedOnly false, episodes without success only when successOnly is off, turns
 * below minReward (their own reward, turnReward) and turns of agents not in `agents` or without a trained token left out.
 */
export function sftTurns(episodes: readonly StoredEpisode[], from: SftSource, agents: ReadonlySet<string>): SftTurn[] {
  const ordered = [...episodes].sort((a, b) => a.meta.step - b.meta.step || a.meta.groupIndex - b.meta.groupIndex || a.meta.episodeIndex - b.meta.episodeIndex);
  const out: SftTurn[] = [];
  for (const e of ordered) {
    const status = e.trajectory.status;
    if (status === 'failed' || (status === 'truncated' && from.completedOnly !== false)) continue;
    if (from.successOnly && e.success !== true) continue;
    for (const t of e.trajectory.turns) {
      if (!agents.has(t.agent) || !t.lossMask.some((m) => m === 1)) continue;
      if (from.minReward !== undefined && turnReward(e, t.index) < from.minReward) continue;
      out.push({ id: `${e.meta.episodeId}#${t.index}`, agent: t.agent, context: t.contextTokens, tokens: t.responseTokens, mask: t.lossMask });
    }
  }
  return out;
}

/** The indices of step `step`'s batch among `n` turns: `size` of them without replacement, from (seed, step) only; all when size >= n. */
export function sftSelection(n: number, size: number, seed: number, step: number): number[] {
  if (size >= n) return Array.from({ length: n }, (_, i) => i);
  const rand = seededRandom(deriveSeed(seed, 'sft', step));
  // the first `size` places of a Fisher-Yates shuffle; an index not moved yet stands for itself
  const moved = new Map<number, number>();
  const at = (i: number) => moved.get(i) ?? i;
  const out: number[] = [];
  for (let i = 0; i < size; i++) {
    const j = i + Math.floor(rand() * (n - i));
    out.push(at(j));
    moved.set(j, at(i));
  }
  return out.sort((a, b) => a - b);
}

/**
 * The step's batch as the update's sequences: per model, its agents' selected turns with advantage 1 on
 * every trained token, the model's aggregation weights, and no old log-probs yet (withBaseLogprobs).
 * The other parts of a StepBatch are empty: there is no rollout.
 */
export function sftStepBatch(turns: readonly SftTurn[], team: Pick<AnyTeam, 'agents'>, models: Record<string, OptimizerSettings>): StepBatch {
  const byModel: Record<string, UpdateSequence[]> = {};
  for (const [model, s] of Object.entries(models)) {
    const mine = turns.filter((t) => team.agents[t.agent]?.model === model);
    const agg = aggregationWeights(
      mine.map((t) => t.mask as Array<0 | 1>),
      s.lossAggregation,
      s.horizon ? { horizon: s.horizon } : {},
    );
    byModel[model] = mine.map((t, k) => ({
      agent: t.agent,
      version: 0,
      context: t.context,
      tokens: t.tokens,
      mask: t.mask,
      advantages: t.mask.map((m) => (m === 1 ? 1 : 0)),
      oldLogprobs: [],
      weights: Array.from(agg.weights[k] ?? []),
    }));
  }
  return {
    models: byModel,
    diagnostics: {},
    rewards: {},
    entropy: {},
    counts: { episodes: 0, completed: 0, truncated: 0, failed: 0, samples: turns.length, excluded: 0 },
    endings: {},
    lengths: {},
    scores: {},
    turnAdvantages: [],
  };
}

/** The sequences with `logprobs[i]` (the base version's Score of sequence i) as their old log-probs: the ratio is 1 at the step's weights. */
export function withBaseLogprobs(sequences: readonly UpdateSequence[], logprobs: readonly number[][]): UpdateSequence[] {
  return sequences.map((q, i) => {
    const scored = logprobs[i];
    if (scored?.length !== q.tokens.length) throw new Error(`the Score of sequence ${i} has ${scored?.length ?? 'no'} log-probs for ${q.tokens.length} tokens`);
    return { ...q, oldLogprobs: scored };
  });
}

/**
 * The step's cross-entropy under the base version (before the update): per agent the mean −logp over its
 * trained tokens (train `sft.ce`), with its turns and tokens; per model the loss the update minimises, −Σ_t w_t·logp_t (update `sft.ce`).
 */
export function sftRows(model: string, sequences: readonly UpdateSequence[]): StepRow[] {
  const agents = new Map<string, { nll: number; tokens: number; turns: number }>();
  let loss = 0;
  for (const q of sequences) {
    const a = agents.get(q.agent) ?? { nll: 0, tokens: 0, turns: 0 };
    agents.set(q.agent, a);
    a.turns++;
    q.mask.forEach((m, t) => {
      if (m !== 1) return;
      const logp = q.oldLogprobs[t] ?? NaN;
      a.nll -= logp;
      a.tokens++;
      loss -= (q.weights[t] ?? 0) * logp;
    });
  }
  // the model's under kind update (as its update's metrics): a model may share its name with an agent
  const rows: StepRow[] = [{ kind: 'update', scope: model, name: 'sft.ce', value: loss }];
  for (const [agent, a] of agents)
    rows.push(
      { kind: 'train', scope: agent, name: 'sft.ce', value: a.tokens > 0 ? a.nll / a.tokens : NaN },
      { kind: 'train', scope: agent, name: 'sft.turns', value: a.turns },
      { kind: 'train', scope: agent, name: 'sft.tokens', value: a.tokens },
    );
  return rows;
}

/** A tokenizer's identity: what must agree for a token id to mean the same text in both runs. */
function tokenizerPrint(t: Tokenizer): string {
  // the text of the first and the last ids (all of a small vocabulary): enough to tell two vocabularies apart
  const ids = [
    ...new Set([...Array.from({ length: Math.min(t.size, 2048) }, (_, i) => i), ...Array.from({ length: Math.min(t.size, 256) }, (_, i) => t.size - 1 - i)]),
  ];
  const text = ids.map((i) => {
    try {
      return t.decode([i]);
    } catch {
      return null;
    }
  });
  return canonical({ kind: t.kind, size: t.size, padId: t.padId, bosId: t.bosId, eosId: t.eosId, text });
}

/** The source run's team, and the agents of this run's trained models that it has with the same tokenizer. */
export async function checkSftSource(sql: Sql, config: SftOf, team: AnyTeam): Promise<{ agents: string[] }> {
  const sft = config.sft;
  if (sft?.jsonl !== undefined) {
    jsonlTurns(sft.jsonl, trainedAgents(config, team), team);
    return { agents: trainedAgents(config, team) };
  }
  if (!sft?.from) return { agents: [] };
  const from = sft.from;
  const field = 'sft.from.run';
  const run = await getRun(sql, from.run);
  if (!run) throw new InitSourceError(field, `no run ${from.run} in the store`, 'troupe list shows the runs');
  let theirs: AnyTeam;
  try {
    theirs = loadTeam(run.team, (run.config.teamOptions as Record<string, unknown> | undefined) ?? {});
  } catch (e) {
    throw new InitSourceError(field, `run ${from.run}'s team ${run.team} cannot be loaded here: ${(e as Error).message}`);
  }
  const modelOf = (t: AnyTeam, agent: string) => {
    const m = t.agents[agent]?.model;
    return m === undefined ? undefined : t.models[m];
  };
  const agents = trainedAgents(config, team).filter((a) => theirs.agents[a]);
  if (agents.length === 0)
    throw new InitSourceError(
      field,
      `run ${from.run} (team ${run.team}, agents ${theirs.roles.join(', ')}) has no agent of this run's trained models (${team.roles.join(', ')})`,
      'turns are matched to this run by agent name',
    );
  for (const a of agents) {
    const ours = modelOf(team, a)?.tokenizer;
    const other = modelOf(theirs, a)?.tokenizer;
    if (!ours || !other) continue;
    if (tokenizerPrint(ours) !== tokenizerPrint(other))
      throw new InitSourceError(
        field,
        `agent ${a}'s tokenizer in run ${from.run} is not this run's (${other.kind} of ${other.size} ids vs ${ours.kind} of ${ours.size})`,
        'stored turns are token ids: they train only a model with the same tokenizer',
      );
  }
  return { agents };
}

/** The dataset of a config's sft source: the source run's stored turns that pass the filter, for this run's matching agents. */
export async function loadSftDataset(sql: Sql, config: SftOf, team: AnyTeam): Promise<SftTurn[]> {
  const sft = config.sft;
  if (!sft) return [];
  if (sft.jsonl !== undefined) return jsonlTurns(sft.jsonl, trainedAgents(config, team), team);
  const { agents } = await checkSftSource(sql, config, team);
  const f = sft.from;
  if (!f) return [];
  const steps = f.steps ?? {};
  const episodes = await loadEpisodes(
    sql,
    sql`e.run_id = ${f.run} AND e.split = ${f.split} AND e.step >= ${steps.from ?? 0} AND e.step <= ${steps.to ?? 2_147_483_647}`,
  );
  return sftTurns(episodes, f, new Set(agents));
}

const KEEP = 2;

export interface SftDatasets {
  /** The dataset of `config`'s sft source for `team` (loaded once per pool worker for its last KEEP sources). */
  get(config: SftOf, team: AnyTeam): Promise<SftTurn[]>;
}

/** A pool worker's datasets, as step-batches.ts keeps step batches: a failed load is forgotten, so a retry loads again. */
export function sftDatasets(sql: Sql, keep = KEEP): SftDatasets {
  const loaded = new Map<string, Promise<SftTurn[]>>();
  return {
    get(config, team) {
      const key = JSON.stringify([team.name, Object.keys(team.agents), config.frozen ?? [], config.sft?.from, config.sft?.jsonl]);
      const have = loaded.get(key);
      if (have) return have;
      const p = loadSftDataset(sql, config, team).catch((e: unknown) => {
        if (e instanceof InitSourceError) throw ApplicationFailure.nonRetryable(e.message, 'InvalidSft');
        throw e;
      });
      loaded.set(key, p);
      void p.catch(() => {
        if (loaded.get(key) === p) loaded.delete(key);
      });
      for (const old of loaded.keys()) if (loaded.size > keep) loaded.delete(old);
      return p;
    },
  };
}

/** The step's turns: the dataset's selection for (seed, step); an empty dataset fails the run, naming the field. */
export function sftStepTurns(dataset: readonly SftTurn[], sft: SftSetting, seed: number, step: number): SftTurn[] {
  if (dataset.length === 0)
    throw ApplicationFailure.nonRetryable(
      sft.from
        ? `sft.from: no turn of run ${sft.from.run} passes the filter (${JSON.stringify(sft.from)}); nothing to train on`
        : `sft.jsonl: ${sft.jsonl} has no assistant message of this run's trained agents; nothing to train on`,
      'InvalidSft',
    );
  return sftSelection(dataset.length, sft.batch, seed, step).flatMap((i) => dataset[i] ?? []);
}

/** This run's agents whose model trains (not frozen), in team order. */
function trainedAgents(config: SftOf, team: AnyTeam): string[] {
  const trained = new Set(trainedModels(config, Object.keys(team.models)));
  return team.roles.filter((a) => trained.has(team.agents[a]?.model ?? ''));
}

/** One conversation of a JSONL dataset: the agent that speaks as `assistant`, and the messages. */
export interface SftConversation {
  agent: string;
  messages: ChatMessage[];
}

const ROLES = new Set(['system', 'user', 'assistant', 'tool']);

/**
 * The turns of a conversation, rendered as the agent's episode renders its turns (agents/turn.ts): with the
 * team's chat template, the first turn's context is the template's opening of the messages before it (the
 * agent's instructions as the system message unless the conversation has one) and each later turn's is the
 * turn before it, its response and the template's continuation with the messages between; without one, BOS,
 * the instructions (a system message replaces them), the agent's earlier turns and the messages' text. Each
 * assistant message is one turn: its content's tokens and the end token (EOS), every one trained.
 */
export function conversationTurns(team: Pick<AnyTeam, 'tokenizer' | 'chatTemplate' | 'agents'>, c: SftConversation, id: string): SftTurn[] {
  const tok = team.tokenizer;
  const chat = team.chatTemplate;
  const instructions = team.agents[c.agent]?.instructions ?? '';
  const out: SftTurn[] = [];
  let pending: ChatMessage[] = [];
  let system: string | undefined;
  for (const m of c.messages) {
    if (m.role === 'system' && out.length === 0) system = m.content;
    if (m.role !== 'assistant') {
      pending.push(m);
      continue;
    }
    const prev = out[out.length - 1];
    let context: number[];
    if (chat) {
      const opening = system === undefined && instructions ? [{ role: 'system' as const, content: instructions }, ...pending] : pending;
      context = prev ? [...prev.context, ...prev.tokens, ...tok.encode(chat.next(pending, true))] : tok.encode(chat.open(opening));
    } else {
      const text = pending
        .filter((p) => p.role !== 'system')
        .map((p) => p.content)
        .join('');
      context = [tok.bosId, ...tok.encode(system ?? instructions), ...(prev ? [...prev.context.slice(1), ...prev.tokens] : []), ...tok.encode(text)];
    }
    const tokens = [...tok.encode(m.content), tok.eosId];
    out.push({ id: `${id}#${out.length}`, agent: c.agent, context, tokens, mask: tokens.map(() => 1) });
    pending = [];
  }
  return out;
}

/** A JSONL file's turns for `agents` (this run's trained ones); a bad line is refused naming it (`sft.jsonl: line N: ...`). */
export function jsonlTurns(file: string, agents: readonly string[], team: AnyTeam): SftTurn[] {
  const bad = (line: number | undefined, message: string) => new InitSourceError('sft.jsonl', line === undefined ? message : `line ${line}: ${message}`);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw bad(undefined, `cannot read ${file}: ${(e as Error).message}`);
  }
  const out: SftTurn[] = [];
  text.split('\n').forEach((raw, i) => {
    const line = i + 1;
    if (raw.trim() === '') return;
    let c: unknown;
    try {
      c = JSON.parse(raw);
    } catch {
      throw bad(line, 'not JSON');
    }
    const { agent, messages } = (c ?? {}) as { agent?: unknown; messages?: unknown };
    if (typeof agent !== 'string' || !agents.includes(agent))
      throw bad(line, `agent ${JSON.stringify(agent)} is not an agent of this run's trained models (${agents.join(', ')})`);
    if (!Array.isArray(messages) || messages.length === 0) throw bad(line, 'messages: must be a non-empty list of {"role", "content"}');
    messages.forEach((m: { role?: unknown; content?: unknown } | null, k) => {
      if (typeof m?.role !== 'string' || !ROLES.has(m.role) || typeof m.content !== 'string')
        throw bad(line, `messages[${k}]: must be {"role": system|user|assistant|tool, "content": "<text>"}`);
    });
    if (!messages.some((m: ChatMessage) => m.role === 'assistant')) throw bad(line, 'no assistant message: nothing to train on');
    try {
      out.push(...conversationTurns(team, { agent, messages: messages as ChatMessage[] }, `${file}:${line}`));
    } catch (e) {
      throw bad(line, (e as Error).message);
    }
  });
  return out;
}
