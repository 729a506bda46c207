/**
 * The project's own lint rules (tools/eslint): troupe/layers refuses an import from a higher
 * layer, type-only ones included unless listed as an exception; troupe/no-cycle refuses
 * load-time import cycles and lets type-only and lazy imports point back.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, it } from 'node:test';
import { ESLint, type Rule, RuleTester } from 'eslint';
import tseslint from 'typescript-eslint';

const tools = path.join(__dirname, '..', '..', '..', 'tools', 'eslint');
const layers = require(path.join(tools, 'layers.js')) as { rule: Rule.RuleModule; repoRoot: string };
const cycles = require(path.join(tools, 'cycles.js')) as { rule: Rule.RuleModule };

RuleTester.describe = describe;
RuleTester.it = it;
RuleTester.itOnly = it.only;

const at = (rel: string) => path.join(layers.repoRoot, rel);
const upward = (from: string, fromLayer: string, to: string, toLayer: string) => ({
  message: new RegExp(`^${from} \\(layer ${fromLayer.replace(/[{}]/g, '\\$&')}\\) imports ${to} \\(layer ${toLayer}\\), a higher layer`),
});

new RuleTester({ languageOptions: { parser: tseslint.parser } }).run('troupe/layers', layers.rule, {
  valid: [
    { filename: at('infra/db.ts'), code: "import { loadConfig } from './config';" },
    { filename: at('activities/x.ts'), code: "import { grpo } from '../rl/estimators'; import { z } from 'zod';" },
    { filename: at('engines/onnx/x.ts'), code: "import { Code } from '../protocol/errors'; import { spec } from '../families/qwen3';" },
    { filename: at('engines/conformance/x.ts'), code: "import { server } from '../pytorch';" },
    { filename: at('test/unit/x.test.ts'), code: "import { rule } from '../../tools/eslint/layers.js';" },
    // The documented exception: a type, from the one file it is listed for.
    { filename: at('schema/run-config.ts'), code: "import type { AnyTeam } from '../agents/team';" },
    { filename: at('schema/run-config.ts'), code: "import { type AnyTeam } from '../agents/team';" },
    // The public entry points: over the library, run control and process wiring, under the CLI.
    { filename: at('client.ts'), code: "import { connectRuns } from './control/runs'; import { x } from './processes/project';" },
    { filename: at('cli/x.ts'), code: "import { connectTroupe } from '../client';" },
    { filename: at('examples/x.ts'), code: "import { defineTeam } from '..';" },
    { filename: at('eslint.config.mjs'), code: "import layers from './tools/eslint/layers.js';" },
  ],
  invalid: [
    {
      filename: at('tools/test.js'),
      code: "const { resolveTestDatabaseServer } = require('../test/helpers/database.ts');",
      errors: [upward('tools/test.js', 'tools', 'test/helpers/database.ts', 'test')],
    },
    {
      filename: at('client.ts'),
      code: "import { runIdFor } from './cli/commands/train';",
      errors: [upward('client.ts', '{index.ts,client.ts}', 'cli/commands/train', 'cli')],
    },
    {
      filename: at('control/runs.ts'),
      code: "import { connectTroupe } from '../client';",
      errors: [upward('control/runs.ts', 'control', 'client', '{index.ts,client.ts}')],
    },
    // No library code reaches the stack's processes.
    {
      filename: at('infra/x.ts'),
      code: "import { spawnService } from '../stack/processes';",
      errors: [upward('infra/x.ts', 'infra', 'stack/processes', 'stack')],
    },
    {
      filename: at('gpu-workers/x.ts'),
      code: "import { BUILT_IN_ENGINE_COMMAND } from '../processes/engine-kinds';",
      errors: [upward('gpu-workers/x.ts', 'gpu-workers', 'processes/engine-kinds', 'processes')],
    },
    {
      filename: at('engines/protocol/client.ts'),
      code: "export { session } from '../onnx/session';",
      errors: [upward('engines/protocol/client.ts', 'engines/{protocol,checkpoints}', 'engines/onnx/session', 'engines/\\{onnx,conformance,pytorch\\}')],
    },
    { filename: at('rl/x.ts'), code: "type W = typeof import('../workflows/training');", errors: [upward('rl/x.ts', 'rl', 'workflows/training', 'workflows')] },
    {
      filename: at('agents/x.ts'),
      code: "const m = () => import('../activities/llm');",
      errors: [upward('agents/x.ts', 'agents', 'activities/llm', 'activities')],
    },
    // The exception covers only the listed type, only type-only, only from its file.
    {
      filename: at('schema/run-config.ts'),
      code: "import { AnyTeam } from '../agents/team';",
      errors: [upward('schema/run-config.ts', 'schema', 'agents/team', 'agents')],
    },
    {
      filename: at('schema/run-config.ts'),
      code: "import type { Team } from '../agents/team';",
      errors: [upward('schema/run-config.ts', 'schema', 'agents/team', 'agents')],
    },
    {
      filename: at('schema/optimizer.ts'),
      code: "import type { AnyTeam } from '../agents/team';",
      errors: [upward('schema/optimizer.ts', 'schema', 'agents/team', 'agents')],
    },
    {
      filename: at('cli/x.ts'),
      code: "import '../deploy/k8s/thing';",
      errors: [{ message: 'deploy/k8s/thing is in no layer: add its folder to LAYERS in tools/eslint/layers.js' }],
    },
    {
      filename: at('newfolder/x.ts'),
      code: "import { z } from 'zod';",
      errors: [{ message: 'newfolder/x.ts is in no layer: add its folder (or, at the top level, the file) to LAYERS in tools/eslint/layers.js' }],
    },
  ],
});

describe('troupe/no-cycle', () => {
  const dirs: string[] = [];
  after(() => dirs.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));

  /** Lints the files as one fresh project (a folder of its own: typescript-eslint keeps a program per tsconfig). */
  async function lint(files: Record<string, string>): Promise<string[]> {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-no-cycle-'));
    dirs.push(dir);
    for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), text);
    fs.writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions: { strict: true, noEmit: true, types: [] }, include: ['*.ts'] }));
    const eslint = new ESLint({
      cwd: dir,
      overrideConfigFile: true,
      overrideConfig: [
        {
          files: ['**/*.ts'],
          languageOptions: { parser: tseslint.parser, parserOptions: { project: './tsconfig.json', tsconfigRootDir: dir } },
          plugins: { troupe: { rules: { 'no-cycle': cycles.rule } } },
          rules: { 'troupe/no-cycle': 'error' },
        },
      ],
    });
    const results = await eslint.lintFiles(Object.keys(files));
    return results.flatMap((r) => r.messages.map((m) => `${path.basename(r.filePath)}:${m.line}: ${m.message}`));
  }

  it('refuses a cycle of load-time imports, at each import that closes it', async () => {
    const found = await lint({
      'a.ts': "import { b } from './b';\nexport const a = () => b();\n",
      'b.ts': "import { c } from './c';\nexport const b = () => c();\n",
      'c.ts': "export { a } from './a';\nexport const c = () => 1;\n",
      'd.ts': "import { a } from './a';\nexport const d = a;\n",
    });
    assert.equal(found.length, 3, found.join('\n'));
    assert.match(found[0]!, /^a\.ts:1: Import cycle: a\.ts imports b\.ts, which leads back here \(3 modules in the cycle: a\.ts, b\.ts, c\.ts\)/);
    assert.match(found[1]!, /^b\.ts:1: Import cycle: b\.ts imports c\.ts/);
    assert.match(found[2]!, /^c\.ts:1: Import cycle: c\.ts imports a\.ts/);
  });

  it('lets a type-only import or a lazy require point back', async () => {
    const found = await lint({
      'a.ts': "import { b } from './b';\nexport type A = number;\nexport const a = (): A => b();\n",
      'b.ts':
        "import type { A } from './a';\nimport { type A as A2 } from './a';\nexport const b = (): A => (require('./a') as typeof import('./a')).a() as A2;\n",
    });
    assert.deepEqual(found, []);
  });
});
