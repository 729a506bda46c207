/** parseOptions: strict, numbers parsed, a negative number is a value. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { defineCommand, parseOptions } from '../../../cli/command';
import { TroupeError } from '../../../infra/errors';

const cmd = defineCommand({
  name: 'demo',
  summary: 'a command to parse options for',
  usage: 'troupe demo [options]',
  options: {
    message: { type: 'string', short: 'm', description: 'text' },
    lr: { type: 'number', example: '0.001', description: 'a number' },
    json: { type: 'boolean', description: 'a switch' },
  },
  positionals: true,
  run: async () => 0,
});

test('a negative number after an option that takes a value is its value, long or short', () => {
  assert.deepEqual(parseOptions(cmd, ['-m', '-3', '--lr', '-1.5e-3', '--json', 'pos']), {
    values: { message: '-3', lr: -0.0015, json: true },
    positionals: ['pos'],
  });
  assert.deepEqual(parseOptions(cmd, ['--lr=-2']).values, { lr: -2 });
});

test('number options: not a number names the option and hints with its example', () => {
  for (const bad of ['NaN', 'abc', '', ' ', 'Infinity']) {
    assert.throws(
      () => parseOptions(cmd, ['--lr', bad]),
      (e: unknown) => e instanceof TroupeError && e.message === `--lr: expected a number, got ${JSON.stringify(bad)}` && e.hint === 'e.g. --lr 0.001',
    );
  }
});

test("node's parse errors stay whole, on one line", () => {
  assert.throws(
    () => parseOptions(cmd, ['--message', '--json']),
    (e: unknown) => e instanceof TroupeError && !e.message.includes('\n') && /demo: Option '--message' argument is ambiguous\. Did you forget/.test(e.message),
  );
});
