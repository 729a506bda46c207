import assert from 'node:assert/strict';
import { createDecipheriv } from 'node:crypto';
import { test } from 'node:test';
import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import { AesGcmCodec, ENCRYPTED_ENCODING, KEY_ID_METADATA } from '../../../infra/codec';
import { loadConfig } from '../../../infra/config';
import { TroupeError } from '../../../infra/errors';

// Fixed test keys (not secrets): 32 bytes each.
const keyA = new Uint8Array(32).fill(0xa1);
const keyB = new Uint8Array(32).fill(0xb2);
const b64 = (k: Uint8Array) => Buffer.from(k).toString('base64');
/** Does `hay` contain the UTF-8 bytes of `needle`? */
const contains = (hay: Uint8Array, needle: string) => Buffer.from(hay).includes(needle);
const secret = { team: 'math', prompt: 'What is 17 * 23? Think step by step.' };
const text = (b?: Uint8Array | null) => new TextDecoder().decode(b ?? new Uint8Array());

async function rejects(p: Promise<unknown>, pattern: RegExp) {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof TroupeError, `expected a TroupeError, got ${e}`);
    assert.match(e.message, pattern);
    return true;
  });
}

test('round trip: what was encoded decodes to the same payload; the sealed form carries no cleartext', async () => {
  const codec = new AesGcmCodec({ keyId: 'k1', key: keyA, oldKeys: {} });
  const plain = [
    defaultPayloadConverter.toPayload(secret),
    defaultPayloadConverter.toPayload(null),
    defaultPayloadConverter.toPayload(new Uint8Array([1, 2, 3])),
  ];
  const sealed = await codec.encode(plain);
  assert.equal(sealed.length, 3);
  for (const p of sealed) {
    assert.equal(text(p.metadata?.encoding), ENCRYPTED_ENCODING);
    assert.equal(text(p.metadata?.[KEY_ID_METADATA]), 'k1');
    assert.ok(!contains(p.data!, '17 * 23'), 'the prompt is not in the sealed bytes');
    assert.ok(!contains(p.data!, 'json/plain'), 'neither is the original encoding');
  }
  const back = await codec.decode(sealed);
  assert.deepEqual(defaultPayloadConverter.fromPayload(back[0]!), secret);
  assert.equal(defaultPayloadConverter.fromPayload(back[1]!), null);
  assert.deepEqual([...(defaultPayloadConverter.fromPayload(back[2]!) as Uint8Array)], [1, 2, 3]);
  // Two encodings of the same payload differ (a fresh IV each time).
  const [again] = await codec.encode([plain[0]!]);
  assert.notDeepEqual(Buffer.from(again!.data!), Buffer.from(sealed[0]!.data!));
});

test('the sealed format, decrypted independently: IV(12) | AES-256-GCM ciphertext | tag(16), key id as AAD, a serialised Payload inside', async () => {
  const codec = new AesGcmCodec({ keyId: 'k1', key: keyA, oldKeys: {} });
  const original = defaultPayloadConverter.toPayload(secret);
  const [sealed] = await codec.encode([original]);
  const data = sealed!.data!;
  const d = createDecipheriv('aes-256-gcm', keyA, data.subarray(0, 12));
  d.setAAD(new TextEncoder().encode('k1'));
  d.setAuthTag(data.subarray(data.length - 16));
  const inner = temporal.api.common.v1.Payload.decode(new Uint8Array([...d.update(data.subarray(12, data.length - 16)), ...d.final()]));
  assert.equal(text(inner.metadata.encoding), 'json/plain');
  assert.deepEqual(JSON.parse(text(inner.data)), secret);
});

test('a tampered payload is refused, naming its key id', async () => {
  const codec = new AesGcmCodec({ keyId: 'k1', key: keyA, oldKeys: {} });
  const [sealed] = await codec.encode([defaultPayloadConverter.toPayload(secret)]);
  for (const at of [0, 20, sealed!.data!.length - 1]) {
    const data = new Uint8Array(sealed!.data!);
    data[at]! ^= 0x01;
    await rejects(codec.decode([{ ...sealed!, data }]), /does not decrypt with key id "k1"/);
  }
  // Relabelling it with another id that this process has is refused too (the id is authenticated).
  const both = new AesGcmCodec({ keyId: 'k2', key: keyA, oldKeys: { k1: keyA } });
  const relabelled: Payload = { ...sealed!, metadata: { ...sealed!.metadata, [KEY_ID_METADATA]: new TextEncoder().encode('k2') } };
  await rejects(both.decode([relabelled]), /does not decrypt with key id "k2"/);
  await rejects(codec.decode([{ ...sealed!, data: sealed!.data!.subarray(0, 10) }]), /key id "k1"\) is truncated/);
});

test('a wrong key for the id, or an id this process lacks, is an error naming the key id', async () => {
  const writer = new AesGcmCodec({ keyId: 'k1', key: keyA, oldKeys: {} });
  const sealed = await writer.encode([defaultPayloadConverter.toPayload(secret)]);
  await rejects(new AesGcmCodec({ keyId: 'k1', key: keyB, oldKeys: {} }).decode(sealed), /does not decrypt with key id "k1"/);
  await rejects(
    new AesGcmCodec({ keyId: 'k9', key: keyB, oldKeys: {} }).decode(sealed),
    /encrypted with key id "k1", which this process does not have \(it has "k9"\)/,
  );
});

test('rotation: a new key encrypts, an old key listed in TROUPE_PAYLOAD_OLD_KEYS still decrypts; cleartext payloads pass through', async () => {
  const before = await new AesGcmCodec({ keyId: '2025', key: keyA, oldKeys: {} }).encode([defaultPayloadConverter.toPayload(secret)]);
  const config = loadConfig({ TROUPE_PAYLOAD_KEY: b64(keyB), TROUPE_PAYLOAD_KEY_ID: '2026', TROUPE_PAYLOAD_OLD_KEYS: `2025=${b64(keyA)}` });
  const rotated = new AesGcmCodec(config.payloadKeys!);
  assert.deepEqual(defaultPayloadConverter.fromPayload((await rotated.decode(before))[0]!), secret);
  const [after] = await rotated.encode([defaultPayloadConverter.toPayload(secret)]);
  assert.equal(text(after!.metadata?.[KEY_ID_METADATA]), '2026');
  const clear = defaultPayloadConverter.toPayload(secret);
  assert.deepEqual((await rotated.decode([clear]))[0], clear);
});
