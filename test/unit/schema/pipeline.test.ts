// The pipeline's checks and references (schema/pipeline.ts), with hand-written pipelines.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parsePipeline, readyStages, stageExport, stageRunConfig, stageRunId } from '../../../schema/pipeline';
import { parseProjectConfig } from '../../../schema/project';

const teacher = { name: 'teacher', run: { team: 'math', steps: 4 } };
const student = { name: 'student', run: { team: 'math', steps: 2, init: { policy: { run: { $run: 'teacher' }, step: { $step: 'teacher' } } } } };

test('a list is a chain: each stage runs after the one before it unless it says otherwise', () => {
  const p = parsePipeline({ name: 'warm', stages: [teacher, student, { name: 'side', run: { team: 'recall' }, after: [] }] });
  assert.deepEqual(
    p.stages.map((s) => [s.name, s.after]),
    [
      ['teacher', []],
      ['student', ['teacher']],
      ['side', []],
    ],
  );
  assert.deepEqual(
    readyStages(p, new Set(), new Set()).map((s) => s.name),
    ['teacher', 'side'],
  );
  assert.deepEqual(
    readyStages(p, new Set(['teacher']), new Set(['teacher', 'side'])).map((s) => s.name),
    ['student'],
  );
  assert.deepEqual(readyStages(p, new Set(['teacher', 'side', 'student']), new Set(['teacher', 'side', 'student'])), []);
});

test('references resolve to the ended stage run id and last step; the stage gets its own run id', () => {
  const p = parsePipeline({ name: 'warm', stages: [teacher, student] });
  const s = p.stages[1];
  assert.ok(s);
  const config = stageRunConfig('warm-1', s, { teacher: { runId: 'warm-1.teacher', step: 4 } });
  assert.deepEqual(config, { team: 'math', steps: 2, init: { policy: { run: 'warm-1.teacher', step: 4 } }, runId: 'warm-1.student' });
  assert.equal(stageRunId('warm-1', 'student'), 'warm-1.student');
  assert.throws(() => stageRunConfig('warm-1', s, {}), /student: stage "teacher" has not ended/);
});

test('every bad field is named', () => {
  assert.throws(
    () =>
      parsePipeline({
        name: 'Bad Name',
        extra: 1,
        stages: [
          { name: 'a', run: { team: 'math', runId: 'mine' } },
          { name: 'a', run: 3 },
          { name: 'b', run: { team: 'math' }, after: ['c'] },
          { name: 'c', run: { team: 'math', init: { p: { run: { $run: 'zzz' }, step: { $step: 'a', more: 1 } } } }, after: [] },
          { name: 'd', run: { team: 'math' }, bogus: true },
        ],
      }),
    (e: Error) => {
      const lines = e.message.replace(/^invalid pipeline: /, '').split('; ');
      assert.deepEqual(lines, [
        'extra: unknown field (known: name, stages)',
        'name: must be up to 30 lower-case letters, digits and -, starting with a letter (got "Bad Name")',
        "stages[0].run.runId: a stage's run id is <pipeline id>.<stage>: leave runId out",
        'stages[1].name: "a" names two stages',
        'stages[1].run: must be a run config object ({ "team": ..., "steps": ... }), got 3',
        'stages[2].after: "c" is not a stage before this one (stages run after earlier stages only)',
        'stages[3].run.init.p.run: $run names "zzz", which this stage does not wait for (it runs after: nothing)',
        'stages[3].run.init.p.step: a reference is { "$step": "<stage>" } alone, not with more',
        'stages[4].bogus: unknown field (known: name, run, export, after)',
      ]);
      return true;
    },
  );
  assert.throws(() => parsePipeline({ name: 'x', stages: [] }), /stages: must be a non-empty array/);
  assert.throws(() => parsePipeline('x'), /\(pipeline\): must be an object/);
});

test("an export stage names a run (or an upstream stage's), a model and a directory; its reference resolves", () => {
  const out = { name: 'out', export: { run: { $run: 'student' }, model: 'policy', out: '/tmp/policy' } };
  const p = parsePipeline({
    name: 'warm',
    stages: [teacher, student, out, { name: 'again', export: { run: 'some-run', model: 'policy', version: 0, out: 'rel' } }],
  });
  const [, , e, again] = p.stages;
  assert.ok(e && again);
  assert.deepEqual(e.after, ['student']);
  assert.equal(e.run, undefined);
  assert.deepEqual(stageExport(e, { student: { runId: 'w.student', step: 1 } }), { runId: 'w.student', model: 'policy', out: '/tmp/policy' });
  assert.deepEqual(stageExport(again, {}), { runId: 'some-run', model: 'policy', version: 0, out: 'rel' });
  assert.throws(
    () =>
      parsePipeline({
        name: 'bad',
        stages: [
          teacher,
          { name: 'both', run: { team: 'math' }, export: { run: 'x', model: 'm', out: 'o' } },
          { name: 'e1', export: { run: { $step: 'teacher' }, model: '', version: -1, out: 3, extra: 1 } },
          { name: 'e2', export: { run: { $run: 'nope' }, model: 'm', out: 'o' }, after: [] },
          { name: 'e3', export: 'x' },
        ],
      }),
    (err: Error) => {
      assert.deepEqual(err.message.replace(/^invalid pipeline: /, '').split('; '), [
        'stages[1]: a stage has run or export, not both',
        'stages[2].export.extra: unknown field (known: run, model, version, out)',
        'stages[2].export.run: must be a run id or { "$run": "<stage>" }, got {"$step":"teacher"}',
        'stages[2].export.model: must name a model of the run, got ""',
        'stages[2].export.out: must be a directory path, got 3',
        "stages[2].export.version: must be an integer >= 0 (default: the run's last version), got -1",
        'stages[3].export.run: $run names "nope", which this stage does not wait for (it runs after: nothing)',
        'stages[4].export: must be an object { run, model, out, version? }, got "x"',
      ]);
      return true;
    },
  );
});

test('a reference may name any stage upstream, not only the one right before', () => {
  const p = parsePipeline({
    name: 'three',
    stages: [teacher, { name: 'mid', run: { team: 'math' } }, { name: 'last', run: { team: 'math', fork: { run: { $run: 'teacher' }, step: 1 } } }],
  });
  assert.deepEqual(p.stages[2]?.after, ['mid']);
});

test("a project's pipelines are checked under pipelines.<name>", () => {
  const c = parseProjectConfig({ teams: { math: './m.ts' }, pipelines: { warm: { stages: [teacher, student] } } });
  assert.deepEqual(Object.keys(c.pipelines), ['warm']);
  assert.equal(c.pipelines.warm?.name, 'warm');
  assert.throws(
    () =>
      parseProjectConfig({
        teams: { math: './m.ts' },
        pipelines: {
          warm: {
            stages: [
              { name: 'a', run: {} },
              { name: 'a', run: {} },
            ],
          },
          bad: 3,
        },
      }),
    (e: Error) => /pipelines\.warm\.stages\[1\]\.name: "a" names two stages/.test(e.message) && /pipelines\.bad: must be \{ stages/.test(e.message),
  );
});
