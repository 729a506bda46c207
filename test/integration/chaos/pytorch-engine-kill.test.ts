/**
 * A pretrained-checkpoint team (full fine-tuning) and a team with one LoRA adapter per agent
 * train on the PyTorch engine end to end, and a SIGKILL of that engine mid-update changes
 * nothing about either result (issues #28, #43). The stack is the
 * chaos harness's (testing/chaos/stack.ts: `troupe up`'s processes) with TROUPE_ENGINE=pytorch,
 * so the pool worker spawns engines/pytorch/server.py as `troupe worker pool --engine pytorch`
 * does. The team is `math` with a transformer policy from the tiny qwen2 checkpoint.
 *
 * An uninterrupted twin runs first; then the same config again, whose step-1 update is held by
 * the engine for a few seconds after it computed the new weights (TROUPE_ENGINE_FAULTS
 * hold-update, engines/pytorch/faults.py), and the engine is killed inside that hold: the update
 * is computed, nothing committed or answered. The pool worker restarts the engine, the update
 * is redone from the stored version, and every version's weights and optimizer state, and every
 * stored episode, must equal the twin's bit for bit (testing/chaos/compare.ts).
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import type { trainingRun } from '../../../workflows';
import { loadHfCheckpoint } from '../../../engines/checkpoints/hf-layout';
import { encodeWeights, sha256Hex } from '../../../engines/protocol/version-bytes';
import { pytorchEngine } from '../../../stack/pytorch-engine';
import { logFilePath, procArgv } from '../../../stack/processes';
import { compareRuns, loadStoredRun } from '../../../testing/chaos/compare';
import { startChaosStack } from '../../../testing/chaos/stack';

const engine = pytorchEngine();
const skip = 'missing' in engine ? engine.missing : false;
const CHECKPOINT = path.resolve(__dirname, '../../fixtures/hf/qwen2-tiny');
const STEPS = 3;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Occurrences of the engine's hold line for `requestId` in the pool worker's log (the engine's stderr goes there). */
function holds(stateDir: string, requestId: string): number {
  const file = logFilePath(stateDir, 'pool-worker');
  if (!fs.existsSync(file)) return 0;
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.includes('"fault_hold_update"') && l.includes(`"${requestId}"`)).length;
}

type ChaosStack = Awaited<ReturnType<typeof startChaosStack>>;
type Diagnostic = (line: string) => void;

/**
 * Runs `config` uninterrupted as `<name>-twin`, then again as `<name>-chaos` with the engine
 * SIGKILLed inside the hold of `<name>-chaos/<held>/step1`; checks the two runs' versions of
 * `models` and episodes are equal bit for bit (`untrained`: the other models' final versions, e.g.
 * a LoRA team's base at 0). Returns the chaos run as stored.
 */
async function twinAndKill(
  stack: ChaosStack,
  log: Diagnostic,
  name: string,
  config: Record<string, unknown>,
  models: string[],
  held: string,
  untrained: Record<string, number> = {},
) {
  const start = (workflowId: string) =>
    stack.client.workflow.start<typeof trainingRun>('trainingRun', { taskQueue: stack.config.taskQueue, workflowId, args: [config as never] });
  const heldId = `${name}-chaos/${held}/step1`;
  let t0 = Date.now();
  const twin = await (await start(`${name}-twin`)).result();
  log(`${name}: uninterrupted run: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  assert.equal(twin.status, 'completed');
  assert.deepEqual(twin.versions, { ...untrained, ...Object.fromEntries(models.map((m) => [m, STEPS])) });

  t0 = Date.now();
  const handle = await start(`${name}-chaos`);
  // inside the hold: the step-1 update has computed its weights on this engine and not answered
  while (holds(stack.stateDir, heldId) < 1) {
    assert.ok(Date.now() - t0 < 600_000, 'the step-1 update never reached the engine');
    await sleep(50);
  }
  const victim = stack.pidOf('engine');
  assert.ok(victim !== undefined, 'an engine is running');
  await stack.kill('engine');
  log(`${name}: SIGKILL engine ${victim} during its step-1 update of ${held}, ${((Date.now() - t0) / 1000).toFixed(1)} s into the run`);
  const successor = await stack.waitForEngine(victim, 120_000);
  const summary = await handle.result();
  log(`${name}: run with the kill: ${((Date.now() - t0) / 1000).toFixed(1)} s; engine ${victim} -> ${successor}`);
  assert.equal(summary.status, 'completed');
  assert.equal(holds(stack.stateDir, heldId), 2, 'the killed update was redone once, on the new engine');

  const base = await loadStoredRun(stack.sql, `${name}-twin`);
  const chaos = await loadStoredRun(stack.sql, `${name}-chaos`);
  const c = compareRuns(base, chaos, STEPS, models);
  log(`${name}: compared ${c.versionsCompared} versions and ${c.episodesCompared} episodes`);
  assert.deepEqual(c.problems, []);
  const untrainedVersions = Object.values(untrained).reduce((n, v) => n + v + 1, 0); // versions 0..v of each
  assert.equal(c.versionsCompared, models.length * (STEPS + 1) + untrainedVersions);
  assert.ok(c.episodesCompared >= STEPS * 8, `compared ${c.episodesCompared} episodes`);
  return chaos;
}

const common = { team: 'math', rollout: 'batched' as const, steps: STEPS, groupsPerStep: 2, groupSize: 4, evalEvery: 0, evalTasks: 2, seed: 5 };

test(
  'a checkpoint team and a LoRA-per-agent team train on the PyTorch engine; a SIGKILL mid-update ends bit-identical',
  { skip, timeout: 900_000 },
  async (t) => {
    const stack = await startChaosStack({
      env: { TROUPE_ENGINE: 'pytorch', TROUPE_ENGINE_FAULTS: 'hold-update:pytorch-chaos/policy/step1$,hold-update:lora-chaos/solver/step1$' },
      log: (l) => t.diagnostic(l),
    });
    let ok = false;
    try {
      // the pool worker's engine is the PyTorch server
      const first = await stack.waitForEngine(undefined, 120_000);
      assert.ok(
        procArgv(first)?.some((a) => a.endsWith(path.join('engines', 'pytorch', 'server.py'))),
        `engine ${first} is engines/pytorch/server.py`,
      );

      // full fine-tuning of a pretrained checkpoint
      const full = await twinAndKill(
        stack,
        (l) => t.diagnostic(l),
        'pytorch',
        { ...common, teamOptions: { policy: 'transformer', checkpoint: CHECKPOINT } },
        ['policy'],
        'policy',
      );
      // version 0 is the checkpoint's θ; each step moved the weights
      const ckpt = loadHfCheckpoint(CHECKPOINT, { maxSeq: 48 });
      assert.equal(full.versions[0]!.weightsSha256, sha256Hex(encodeWeights(ckpt.theta)), "version 0 is the checkpoint's θ");
      assert.equal(new Set(full.versions.map((v) => v.weightsSha256)).size, STEPS + 1, 'every step changed the weights');

      // one LoRA adapter per agent over a shared base (lora-run.test.ts's team), the solver's update killed
      const lora = await twinAndKill(
        stack,
        (l) => t.diagnostic(l),
        'lora',
        { ...common, teamOptions: { models: 'lora', policy: 'transformer' } },
        ['solver', 'verifier'],
        'solver',
        { policy: 0 },
      );
      for (const m of ['solver', 'verifier'])
        assert.equal(new Set(lora.versions.filter((v) => v.model === m).map((v) => v.weightsSha256)).size, STEPS + 1, `every step changed ${m}'s adapter`);
      ok = true;
    } finally {
      await stack.shutdown({ keepState: !ok });
      if (!ok) t.diagnostic(`state kept in ${stack.stateDir}`);
    }
  },
);
