/**
 * Versions in and out: ExportVersion / LoadVersion, unary, in chunks and by
 * reference, and the errors of a load.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import type * as P from '../../protocol/proto';
import { pathToFileURL } from 'node:url';
import { type Check, type Context, expect, ok, sha256Hex } from '../context';
import type { Req } from '../wire-client';
import { sameInfo, loadRequest } from './fixtures';

export const VERSION_CHECKS: Check[] = [
  {
    id: 'export.unary',
    title: 'ExportVersion: sha256(weights) == weights_sha256, 4 bytes per parameter, sha256(optimizer_state) == optimizer_sha256',
    async run(ctx) {
      const { info, weights, optimizerState } = await ctx.base();
      const problems: string[] = [];
      if (sha256Hex(weights) !== info.weightsSha256)
        problems.push(`sha256(weights) ${sha256Hex(weights).slice(0, 12)}… != weights_sha256 ${info.weightsSha256.slice(0, 12)}…`);
      if (weights.length !== 4 * info.paramCount) problems.push(`${weights.length} weight bytes, expected 4 × ${info.paramCount}`);
      if (sha256Hex(optimizerState) !== info.optimizerSha256) problems.push(`sha256(optimizer_state) != optimizer_sha256`);
      expect(problems.length === 0, problems.join('; '));
      return `${weights.length} + ${optimizerState.length} bytes`;
    },
  },
  {
    id: 'export.load',
    title: 'LoadVersion of exported bytes under a new key gives the same shas',
    async run(ctx) {
      await ctx.requireRpcs('LoadVersion');
      const base = await ctx.base();
      const info = ok(
        await ctx.client.unary(
          'LoadVersion',
          loadRequest(ctx.key('loaded'), '0', await ctx.spec(), {
            weights: base.weights,
            optimizerState: base.optimizerState,
            weightsSha256: base.info.weightsSha256,
          }),
        ),
        'LoadVersion',
      );
      expect(
        sameInfo(info, base.info),
        `loaded v${info.version} sha ${info.weightsSha256.slice(0, 12)}… opt ${info.optimizerSha256.slice(0, 12)}…, exported v0 ${base.info.weightsSha256.slice(0, 12)}… opt ${base.info.optimizerSha256.slice(0, 12)}…`,
      );
      const again = ok(
        await ctx.client.unary(
          'LoadVersion',
          loadRequest(ctx.key('loaded'), '0', await ctx.spec(), { weights: base.weights, optimizerState: base.optimizerState }),
        ),
        'LoadVersion repeated (idempotent for identical bytes)',
      );
      expect(sameInfo(again, base.info), 'repeated LoadVersion gave other version info');
    },
  },
  {
    id: 'export.chunks',
    title: "ExportVersionChunks: info first, the joined bytes equal ExportVersion's",
    async run(ctx) {
      await ctx.requireRpcs('ExportVersionChunks');
      const base = await ctx.base();
      const o = await ctx.client.serverStream('ExportVersionChunks', { modelKey: base.key, version: '0' });
      const msgs = ok(o, 'ExportVersionChunks');
      expect(msgs.length > 0 && msgs[0]!.info, `first chunk has no info (${msgs.length} messages)`);
      expect(sameInfo(msgs[0]!.info, base.info), "chunk info differs from ExportVersion's");
      const w = Buffer.concat(msgs.map((m) => Buffer.from(m.weights)));
      const s = Buffer.concat(msgs.map((m) => Buffer.from(m.optimizerState)));
      expect(w.equals(base.weights), `joined weights ${w.length} bytes sha ${sha256Hex(w).slice(0, 12)}… != unary ${base.weights.length} bytes`);
      expect(s.equals(base.optimizerState), `joined optimizer_state ${s.length} bytes != unary ${base.optimizerState.length} bytes`);
      return `${msgs.length} messages`;
    },
  },
  {
    id: 'load.chunks',
    title: 'LoadVersionChunks with the bytes split into several small chunks (bytes in the header message, one message with both kinds) gives the same shas',
    async run(ctx) {
      await ctx.requireRpcs('LoadVersionChunks');
      const base = await ctx.base();
      const header = loadRequest(ctx.key('chunk-loaded'), '0', await ctx.spec(), { weightsSha256: base.info.weightsSha256 });
      const size = Math.max(1, Math.ceil(base.weights.length / 5));
      // bytes in the header's message too, odd offsets, and one message carrying both weights and optimizer bytes
      const msgs: Req<'LoadVersionChunks'>[] = [{ header, weights: base.weights.subarray(0, 3), optimizerState: Buffer.alloc(0) }];
      for (let o = 3; o < base.weights.length; o += size)
        msgs.push({ header: undefined, weights: base.weights.subarray(o, o + size), optimizerState: Buffer.alloc(0) });
      msgs[msgs.length - 1]!.optimizerState = base.optimizerState.subarray(0, 5);
      for (let o = 5; o < base.optimizerState.length; o += size * 2)
        msgs.push({ header: undefined, weights: Buffer.alloc(0), optimizerState: base.optimizerState.subarray(o, o + size * 2) });
      const info = ok(await ctx.client.clientStream('LoadVersionChunks', msgs), 'LoadVersionChunks');
      expect(
        sameInfo(info, base.info),
        `loaded sha ${info.weightsSha256.slice(0, 12)}… opt ${info.optimizerSha256.slice(0, 12)}…, expected ${base.info.weightsSha256.slice(0, 12)}… opt ${base.info.optimizerSha256.slice(0, 12)}…`,
      );
      return `${msgs.length} chunks`;
    },
  },
  {
    id: 'export.reference',
    title:
      'ExportVersion to a destination_uri (created if missing) writes files matching the refs; LoadVersion by weights_ref/optimizer_state_ref gives the same shas',
    async run(ctx) {
      await ctx.requireReferences();
      await ctx.requireRpcs('LoadVersion');
      const base = await ctx.base();
      // a directory that does not exist yet: the proto says the engine creates it
      const dir = path.join(ctx.tmpDir(), 'export', 'new');
      const res = ok(
        await ctx.client.unary('ExportVersion', { modelKey: base.key, version: '0', destinationUri: pathToFileURL(dir).href }),
        'ExportVersion by reference',
      );
      const problems: string[] = [];
      if (res.weights.length || res.optimizerState.length) problems.push(`response also carries ${res.weights.length} + ${res.optimizerState.length} bytes`);
      if (!sameInfo(res.info, base.info)) problems.push("info differs from ExportVersion's");
      const refs = { weightsRef: res.weightsRef, optimizerStateRef: res.optimizerStateRef };
      const expected = { weightsRef: base.weights, optimizerStateRef: base.optimizerState };
      for (const [name, ref] of Object.entries(refs)) {
        if (!ref) {
          problems.push(`${name} missing`);
          continue;
        }
        let file: string;
        try {
          file = new URL(ref.uri).pathname;
          if (!ref.uri.startsWith('file:///')) throw new Error('not file:///');
        } catch {
          problems.push(`${name}.uri ${JSON.stringify(ref.uri)} is not file:///…`);
          continue;
        }
        if (!path.resolve(decodeURIComponent(file)).startsWith(dir)) problems.push(`${name} ${ref.uri} is not under the destination ${dir}`);
        if (!fs.existsSync(decodeURIComponent(file))) {
          problems.push(`${name}: no file at ${decodeURIComponent(file)}`);
          continue;
        }
        const bytes = fs.readFileSync(decodeURIComponent(file));
        const want = expected[name as keyof typeof expected];
        if (String(ref.size) !== String(bytes.length)) problems.push(`${name}.size ${ref.size}, the file has ${bytes.length} bytes`);
        if (ref.sha256 !== sha256Hex(bytes)) problems.push(`${name}.sha256 ${ref.sha256.slice(0, 12)}… != the file's ${sha256Hex(bytes).slice(0, 12)}…`);
        if (!bytes.equals(want)) problems.push(`${name}: the file's bytes differ from ExportVersion's`);
      }
      expect(problems.length === 0, problems.join('; '));
      const info = ok(
        await ctx.client.unary(
          'LoadVersion',
          loadRequest(ctx.key('ref-loaded'), '0', await ctx.spec(), { weightsRef: res.weightsRef!, optimizerStateRef: res.optimizerStateRef! }),
        ),
        'LoadVersion by reference',
      );
      expect(sameInfo(info, base.info), `loaded by reference: sha ${info.weightsSha256.slice(0, 12)}…, expected ${base.info.weightsSha256.slice(0, 12)}…`);
      await ctx.expectError(
        'ExportVersion to an http:// destination',
        () => ctx.client.unary('ExportVersion', { modelKey: base.key, version: '0', destinationUri: 'http://127.0.0.1:1/troupe' }),
        'FAILED_PRECONDITION',
        'REFERENCE_UNREADABLE',
      );
      await ctx.expectError(
        'ExportVersion to a destination under a regular file',
        () => ctx.client.unary('ExportVersion', { modelKey: base.key, version: '0', destinationUri: pathToFileURL(path.join(writeFileRef(ctx), 'sub')).href }),
        'FAILED_PRECONDITION',
        'REFERENCE_UNREADABLE',
      );
    },
  },
  {
    id: 'load.reference-errors',
    title: 'LoadVersion by a weights_ref with a wrong sha256, a wrong size or a missing file → REFERENCE_UNREADABLE',
    async run(ctx) {
      await ctx.requireReferences();
      await ctx.requireRpcs('LoadVersion');
      const base = await ctx.base();
      const spec = await ctx.spec();
      const ref = writeFile(ctx, 'weights.bin', base.weights);
      const cases: [string, P.BlobReference][] = [
        ['wrong sha256', { ...ref, sha256: sha256Hex(Buffer.from('not these weights')) }],
        ['wrong size', { ...ref, size: String(base.weights.length + 4) }],
        ['missing file', { ...ref, uri: pathToFileURL(path.join(ctx.tmpDir(), 'no-such-file.bin')).href }],
      ];
      for (const [what, r] of cases) {
        await ctx.expectError(
          `LoadVersion by a weights_ref with a ${what}`,
          () => ctx.client.unary('LoadVersion', loadRequest(ctx.key('bad-ref'), '0', spec, { weightsRef: r })),
          'FAILED_PRECONDITION',
          'REFERENCE_UNREADABLE',
        );
      }
    },
  },
  {
    id: 'load.sha-mismatch',
    title: 'LoadVersion whose weights_sha256 does not match the bytes → INVALID_REQUEST',
    async run(ctx) {
      await ctx.requireRpcs('LoadVersion');
      const base = await ctx.base();
      const spec = await ctx.spec();
      await ctx.expectError(
        'LoadVersion with a wrong weights_sha256',
        () =>
          ctx.client.unary(
            'LoadVersion',
            loadRequest(ctx.key('bad-sha'), '0', spec, { weights: base.weights, weightsSha256: sha256Hex(Buffer.from('other')) }),
          ),
        'INVALID_ARGUMENT',
        'INVALID_REQUEST',
      );
    },
  },
  {
    id: 'load.wrong-length',
    title: 'LoadVersion with weights one parameter short, or an optimizer_state without the "TRAD" header → INVALID_REQUEST',
    async run(ctx) {
      await ctx.requireRpcs('LoadVersion');
      const base = await ctx.base();
      const spec = await ctx.spec();
      await ctx.expectError(
        'LoadVersion with 4 weight bytes too few',
        () => ctx.client.unary('LoadVersion', loadRequest(ctx.key('short'), '0', spec, { weights: base.weights.subarray(0, base.weights.length - 4) })),
        'INVALID_ARGUMENT',
        'INVALID_REQUEST',
      );
      await ctx.expectError(
        'LoadVersion with an optimizer_state that is not "TRAD"',
        () =>
          ctx.client.unary(
            'LoadVersion',
            loadRequest(ctx.key('bad-optimizer'), '0', spec, { weights: base.weights, optimizerState: Buffer.from('not an optimizer state') }),
          ),
        'INVALID_ARGUMENT',
        'INVALID_REQUEST',
      );
    },
  },
  {
    id: 'load.version-conflict',
    title: 'LoadVersion of an existing version number with other weights → VERSION_CONFLICT, the version unchanged',
    async run(ctx) {
      await ctx.requireRpcs('LoadVersion');
      const base = await ctx.base();
      const other = Buffer.from(base.weights);
      other.writeFloatLE(other.readFloatLE(0) + 0.5, 0);
      await ctx.expectError(
        'LoadVersion of the base v0 with other weights',
        () => ctx.client.unary('LoadVersion', loadRequest(base.key, '0', base.info.spec!, { weights: other })),
        'FAILED_PRECONDITION',
        'VERSION_CONFLICT',
      );
    },
  },
];

/** A regular file in the run's temp dir (a path under it is not a directory anyone can write). */
function writeFileRef(ctx: Context): string {
  const f = path.join(ctx.tmpDir(), 'a-regular-file');
  fs.writeFileSync(f, 'x');
  return f;
}

function writeFile(ctx: Context, name: string, bytes: Uint8Array): P.BlobReference {
  const file = path.join(ctx.tmpDir(), name);
  fs.writeFileSync(file, bytes);
  return { uri: pathToFileURL(file).href, size: String(bytes.length), sha256: sha256Hex(bytes) };
}
