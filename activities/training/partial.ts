/**
 * Partial rollouts (issue #31, docs/running.md "Partial rollouts"): the pure
 * parts of a step's rollout that starts more groups than it needs, ends once
 * enough whole groups finished, and carries the rest into the next step.
 *
 * Which episodes finish in a step must not depend on timing, or a retried or
 * resumed step would train on other groups than the first attempt did. So the
 * episodes advance in lockstep rounds of live generations: round r lets every
 * unfinished episode make its r-th generation, and the rollout decides to stop
 * only at a barrier, when every unfinished episode waits for its next
 * generation. What is finished at a barrier depends on the seeded generations
 * alone. (Episodes that generate for two agents at once are numbered in the
 * order their calls arrive; their cut point may then vary.)
 *
 * A carried episode keeps its generations (tokens, log-probs, the version that
 * sampled them); continuing it runs the episode again from its start with
 * those generations served back (its code and tools are deterministic given
 * them), so none of its tokens is generated twice.
 *
 * How often a group may be carried is bounded (partialRollouts.maxCarrySteps):
 * a group carried that often is held, the rollout does not end before it is
 * whole, so its oldest token is at most maxCarrySteps steps older than the
 * step that trains it and none of its work is thrown away. Whether a group is
 * held depends on its planning step alone (stored with it), so a retried
 * rollout holds the same groups.
 */
import type { GenerateCall, GenerateReply } from '../../agents/episode';

/** One generation of an episode, as stored with a carried episode. */
export interface Generation {
  model: string;
  seed: number;
  contextLength: number;
  tokens: number[];
  logprobs: number[];
  stopReason: GenerateReply['stopReason'];
  /** The version that sampled the tokens. */
  version: number;
}

/** The rejection an unfinished episode's pending generation gets when the rollout ends: the episode is carried. */
export class CarriedOver extends Error {
  override readonly name = 'CarriedOver';
  constructor() {
    super('the step rollout ended before this episode finished: it is carried into the next step');
  }
}

const keyOf = (g: { model: string; seed: number; contextLength: number }) => `${g.model}\u0000${g.seed}\u0000${g.contextLength}`;

/**
 * A generate function for an episode that may have been carried: calls it made
 * before are answered from `earlier` (tagged with their version), new ones go to
 * `live`; every generation, old and new, is appended to `record` once, in call
 * order. An episode started again from its beginning (its thread was stopped for
 * another episode's overrun) is answered from `record`: nothing is sampled twice.
 */
export function continuing(
  earlier: readonly Generation[],
  live: (call: GenerateCall) => Promise<GenerateReply>,
  record: Generation[],
): { generate: (call: GenerateCall) => Promise<GenerateReply>; replayedTokens: () => number } {
  const stored = new Map(earlier.map((g) => [keyOf(g), g]));
  const recorded = new Set<string>();
  let replayed = 0;
  const keep = (key: string, g: Generation) => {
    if (recorded.has(key)) return;
    recorded.add(key);
    record.push(g);
    stored.set(key, g);
  };
  return {
    replayedTokens: () => replayed,
    async generate(call) {
      const key = keyOf({ model: call.model, seed: call.seed, contextLength: call.context.length });
      const old = stored.get(key);
      if (old) {
        if (!recorded.has(key)) replayed += old.tokens.length;
        keep(key, old);
        return { tokens: old.tokens, logprobs: old.logprobs, stopReason: old.stopReason, ...(old.version === call.version ? {} : { version: old.version }) };
      }
      const reply = await live(call);
      keep(key, {
        model: call.model,
        seed: call.seed,
        contextLength: call.context.length,
        tokens: reply.tokens,
        logprobs: reply.logprobs,
        stopReason: reply.stopReason,
        version: call.version,
      });
      return reply;
    },
  };
}

interface Waiter {
  call: number;
  resolve: () => void;
  reject: (e: Error) => void;
}

/**
 * The lockstep rounds of one step's rollout over episodes 0..n-1, each in a group.
 * An episode calls `enter` before each live generation and `leave` after it, and
 * `finish` when it ended (finished episodes, carried ones included, may be finished
 * from the start). At each barrier the rollout ends if at least `minFinished`
 * groups are whole (every episode finished) and so is every group in `held`
 * (groups at the carry bound); pending generations are then rejected with CarriedOver.
 */
export class Lockstep {
  private allowed = 1;
  private readonly calls: number[];
  private readonly inFlight: number[];
  private readonly waiting: Waiter[][];
  private readonly done: boolean[];
  /** Episodes the rollout ended before they finished. */
  private readonly carried: boolean[];
  /** Set once the rollout ended at a barrier. */
  stopped = false;
  /** Barriers passed (rounds of live generations after the first). */
  rounds = 0;

  constructor(
    private readonly groupOf: readonly string[],
    private readonly minFinished: number,
    private readonly held: ReadonlySet<string> = new Set(),
  ) {
    const n = groupOf.length;
    this.calls = new Array<number>(n).fill(0);
    this.inFlight = new Array<number>(n).fill(0);
    this.waiting = Array.from({ length: n }, () => []);
    this.done = new Array<boolean>(n).fill(false);
    this.carried = new Array<boolean>(n).fill(false);
  }

  /** Waits until episode i may make its next live generation; rejects with CarriedOver once the rollout ended. */
  enter(i: number): Promise<void> {
    const call = this.calls[i]!++;
    if (this.stopped) {
      this.carried[i] = true;
      return Promise.reject(new CarriedOver());
    }
    if (call < this.allowed) {
      this.inFlight[i]!++;
      return Promise.resolve();
    }
    const p = new Promise<void>((resolve, reject) => this.waiting[i]!.push({ call, resolve, reject }));
    this.check();
    return p;
  }

  leave(i: number) {
    this.inFlight[i]!--;
    this.check();
  }

  finish(i: number) {
    this.done[i] = true;
    this.check();
  }

  /** Groups whose every episode finished (none carried). */
  wholeGroups(): Set<string> {
    const open = new Set<string>();
    this.groupOf.forEach((g, i) => {
      if (!this.done[i] || this.carried[i]) open.add(g);
    });
    return new Set(this.groupOf.filter((g) => !open.has(g)));
  }

  private check() {
    if (this.stopped) return;
    let anyOpen = false;
    for (let i = 0; i < this.done.length; i++) {
      if (this.done[i]) continue;
      anyOpen = true;
      // not at the barrier: generating, or running its own code or tools before its next generation
      if (this.inFlight[i]! > 0 || this.waiting[i]!.length === 0) return;
    }
    if (!anyOpen) return;
    const whole = this.wholeGroups();
    if (whole.size >= this.minFinished && [...this.held].every((g) => whole.has(g))) {
      this.stopped = true;
      this.waiting.forEach((ws, i) => {
        if (ws.length > 0) this.carried[i] = true;
        for (const w of ws.splice(0)) w.reject(new CarriedOver());
      });
      return;
    }
    this.rounds++;
    this.allowed = Math.max(this.allowed + 1, Math.min(...this.waiting.flatMap((ws) => ws.map((w) => w.call))) + 1);
    this.waiting.forEach((ws, i) => {
      const go = ws.filter((w) => w.call < this.allowed);
      this.waiting[i] = ws.filter((w) => w.call >= this.allowed);
      for (const w of go) {
        this.inFlight[i]!++;
        w.resolve();
      }
    });
  }
}

/** A group's key: the step that planned it and its index there (carried groups keep theirs). */
export const groupKey = (fromStep: number, groupIndex: number) => `s${fromStep}:g${groupIndex}`;

/**
 * The groups the rollout of `step` must finish: those planned maxCarrySteps or more steps
 * before it (carried maxCarrySteps times), whose keys are given with their planning step.
 * None without a bound.
 */
export function heldGroups(step: number, groups: ReadonlyArray<{ key: string; fromStep: number }>, maxCarrySteps: number | undefined): Set<string> {
  if (maxCarrySteps === undefined) return new Set();
  return new Set(groups.filter((g) => step - g.fromStep >= maxCarrySteps).map((g) => g.key));
}
