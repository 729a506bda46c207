/**
 * Batched episodes get the determinism durable ones get from Temporal's
 * workflow sandbox: inside the episode function, `Math.random()` is seeded
 * from the episode's seed and `Date.now()` is a logical clock, so two batched
 * runs with the same seed make the same episodes, however their turns
 * interleave. (Durable episodes: Temporal seeds `Math.random` per workflow and
 * `Date.now` is workflow time; the two modes are each reproducible, not equal
 * to each other, which is why episode code should not use them at all.)
 *
 * The globals are replaced once, process-wide, by functions that consult an
 * AsyncLocalStorage: code outside an episode (the Temporal SDK, gRPC, tools)
 * and the episode's I/O (generation, tool calls, turn timing), which runs
 * outside the scope, see the real ones. `new Date()` is not covered.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { JournalDiverged, runEpisode, type EpisodeIO, type EpisodeInput } from '../../agents/episode';
import { JOURNAL_COUNTERS } from '../../gateway/journal';
import { deriveSeed, seededRandom } from '../../agents/seed';
import type { AnyTeam } from '../../agents/team';
import { episodeEnded } from '../../agents/tool';
import type { Trajectory } from '../../schema/trajectory';

interface EpisodeScope {
  random: () => number;
  /** logical milliseconds: advances by one at every I/O the episode awaits */
  clock: number;
}

const scope = new AsyncLocalStorage<EpisodeScope>();
const realRandom = Math.random;
const realNow = Date.now;
let installed = false;

function install(): void {
  if (installed) return;
  installed = true;
  Math.random = () => {
    const s = scope.getStore();
    return s ? s.random() : realRandom();
  };
  Date.now = () => {
    const s = scope.getStore();
    return s ? s.clock : realNow();
  };
}

/**
 * Runs the episode in its own scope; its I/O runs outside it (with the real clock and random).
 * An attempt whose agent code diverged from its gateway journal (gateway/journal.ts) is run
 * again from the start with the journal cleared, and counted (`journalRestarts`).
 */
export async function runBatchedEpisode(team: AnyTeam, input: EpisodeInput, io: EpisodeIO): Promise<Trajectory> {
  try {
    return await runScoped(team, input, io);
  } catch (e) {
    if (!(e instanceof JournalDiverged) || !io.journal) throw e;
    await io.journal.clear(input.episodeId);
    await episodeEnded(input.episodeId); // clean: its servers of scope 'episode' too
    const trajectory = await runScoped(team, input, io);
    const counters = (trajectory.counters ??= {});
    const agent = (counters[e.agent] ??= {});
    agent[JOURNAL_COUNTERS.restarts] = (agent[JOURNAL_COUNTERS.restarts] ?? 0) + 1;
    return trajectory;
  }
}

function runScoped(team: AnyTeam, input: EpisodeInput, io: EpisodeIO): Promise<Trajectory> {
  install();
  const s: EpisodeScope = { random: seededRandom(deriveSeed(input.seed, 'episode-random')), clock: 0 };
  const outside = <T>(fn: () => Promise<T>): Promise<T> =>
    scope.exit(fn).finally(() => {
      s.clock++;
    });
  const scoped: EpisodeIO = {
    generate: (call) => outside(() => io.generate(call)),
    callTool: (req) => outside(() => io.callTool(req)),
    now: () => scope.exit(() => io.now()),
    // the gateway's server answers outside the scope too: its requests are I/O, not episode code
    ...(io.openSessions ? { openSessions: (e) => scope.exit(() => io.openSessions!(e)) } : {}),
    // the journal is the runtime's I/O, not the episode's: it does not advance the logical clock
    ...(io.journal
      ? {
          journal: {
            load: (id) => scope.exit(() => io.journal!.load(id)),
            record: (id, call) => scope.exit(() => io.journal!.record(id, call)),
            clear: (id) => scope.exit(() => io.journal!.clear(id)),
          },
        }
      : {}),
  };
  return scope.run(s, () => runEpisode(team, input, scoped));
}
