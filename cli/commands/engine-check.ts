// troupe engine-check: runs the engine protocol v2 conformance suite
// (engines/conformance/) against an engine at host:port.
import { TroupeError } from '../../infra/errors';
import { CHECKS, checkIds, EngineUnreachableError, formatSummary, runConformance } from '../../engines/conformance';
import { defineCommand } from '../command';

export default defineCommand({
  name: 'engine-check',
  summary: 'Check that a model engine at host:port implements engine protocol v2 (conformance suite)',
  usage: 'troupe engine-check <host:port> [--json] [--only id,id] [--skip id,id] [--shared-dir DIR]',
  description:
    'Talks to the engine over gRPC as any caller could, with well-formed and malformed requests: Health and capabilities, ' +
    'InitModel, export/load round trips (bytes, chunks, by reference), Generate, Score, Update/UpdateStream, error reasons, Abort, chunk sizes. ' +
    'Prints one line per check (PASS/FAIL/SKIP id: detail) and a summary; exits 0 iff no check failed. ' +
    'It loads small models under keys "conformance-<random>-*" into the engine. ' +
    'Checks (engines/conformance/README.md says what each means): ' +
    CHECKS.map((c) => c.id).join(', ') +
    '. --only takes ids or prefixes ending in "." (e.g. --only update.,abort.generate).',
  options: {
    json: { type: 'boolean', description: 'print one JSON object (results, capabilities, counts) instead of lines' },
    only: { type: 'string', valueName: 'IDS', description: 'run only these checks (comma-separated ids or prefixes like "update.")' },
    skip: { type: 'string', valueName: 'IDS', description: 'report these checks as SKIP without running them (ids or prefixes)' },
    'shared-dir': {
      type: 'string',
      valueName: 'DIR',
      description: 'a directory the engine reads and writes at the same path (by-reference checks; default the OS temp dir)',
    },
  },
  positionals: true,
  async run({ values, positionals, log }) {
    if (positionals.length !== 1) {
      throw new TroupeError(
        `engine-check: expected one engine address, got ${positionals.length ? positionals.join(' ') : 'none'}`,
        'e.g. `npx troupe engine-check 127.0.0.1:50051`',
      );
    }
    const address = positionals[0]!;
    if (!/^(\[[0-9a-fA-F:.]+\]|[^\s:/]+):\d+$/.test(address)) {
      throw new TroupeError(`engine-check: "${address}" is not host:port`, 'e.g. `npx troupe engine-check 127.0.0.1:50051`');
    }
    const list = (v: string | undefined) =>
      v
        ?.split(',')
        .map((s) => s.trim())
        .filter(Boolean);
    const only = list(values.only);
    const skip = list(values.skip);
    for (const [flag, ids] of [
      ['--only', only],
      ['--skip', skip],
    ] as const) {
      try {
        if (ids) checkIds(ids);
      } catch (e) {
        throw new TroupeError(`engine-check: ${flag}: ${(e as Error).message}`);
      }
    }
    let report;
    try {
      report = await runConformance(address, {
        only,
        skip,
        sharedDir: values['shared-dir'],
        log: values.json ? undefined : (line) => console.log(line),
      });
    } catch (e) {
      if (e instanceof EngineUnreachableError) {
        throw new TroupeError(
          `engine-check: no engine answers at ${address} (${e.message})`,
          'start one (e.g. `node --import tsx processes/onnx-engine.ts --port 50051`) or check the address',
        );
      }
      throw e;
    }
    if (values.json) console.log(JSON.stringify(report, null, 2));
    else {
      const c = report.capabilities;
      if (c) log(`engine: ${c.engine} (protocol ${c.protocolVersion})`);
      console.log(formatSummary(report));
    }
    return report.counts.fail === 0 ? 0 : 1;
  },
});
