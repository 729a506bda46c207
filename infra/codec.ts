// The payload codec: AES-256-GCM encryption of every payload that Troupe's clients and
// workers send to Temporal (workflow and activity inputs and results, signals, queries,
// memos), so run configs, prompts and trajectories are not stored in clear in Temporal's
// history. Codecs run outside the workflow sandbox, on the encoded payloads: workflow code
// and its replay are unchanged.
//
// An encrypted payload is the original Payload message, serialised and sealed:
//   metadata { encoding: "binary/encrypted", "encryption-key-id": <id>, "encryption-cipher": "AES-256-GCM" }
//   data     = 12-byte IV | ciphertext | 16-byte tag      (the key id is authenticated too)
// Decoding picks the key by the id in the payload, so keys rotate: the new key encrypts,
// the old ones (TROUPE_PAYLOAD_OLD_KEYS) still decrypt what was written with them.
// Payloads without the encrypted encoding pass through, so histories written before the
// codec was turned on still read.
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import type { Payload, PayloadCodec } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import type { PayloadKeysConfig } from './config';
import { TroupeError } from './errors';

export const ENCRYPTED_ENCODING = 'binary/encrypted';
export const KEY_ID_METADATA = 'encryption-key-id';
export const CIPHER = 'AES-256-GCM';
const IV_BYTES = 12;
const TAG_BYTES = 16;

const utf8 = (s: string) => new TextEncoder().encode(s);
const text = (b: Uint8Array | null | undefined) => (b ? new TextDecoder().decode(b) : '');
// Node's Buffers, as the plain Uint8Arrays that Temporal's types (and this TypeScript setup) want.
const bytes = (b: Buffer): Uint8Array => new Uint8Array(b.buffer, b.byteOffset, b.byteLength);

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

export class AesGcmCodec implements PayloadCodec {
  private readonly keys: ReadonlyMap<string, Uint8Array>;

  constructor(private readonly config: PayloadKeysConfig) {
    for (const [id, key] of [[config.keyId, config.key] as const, ...Object.entries(config.oldKeys)]) {
      if (key.length !== 32) throw new TroupeError(`payload key ${id} is ${key.length} bytes, AES-256 needs 32`);
    }
    this.keys = new Map([...Object.entries(config.oldKeys), [config.keyId, config.key]]);
  }

  async encode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((p) => {
      // A GCM IV must never repeat under one key: it comes from the OS's CSPRNG, not a seed.
      const iv = bytes(randomBytes(IV_BYTES));
      const cipher = createCipheriv('aes-256-gcm', this.config.key, iv);
      cipher.setAAD(utf8(this.config.keyId));
      const plain = temporal.api.common.v1.Payload.encode(p).finish();
      const sealed = concat([iv, bytes(cipher.update(plain)), bytes(cipher.final()), bytes(cipher.getAuthTag())]);
      return {
        metadata: { encoding: utf8(ENCRYPTED_ENCODING), [KEY_ID_METADATA]: utf8(this.config.keyId), 'encryption-cipher': utf8(CIPHER) },
        data: sealed,
      };
    });
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((p) => {
      if (text(p.metadata?.encoding) !== ENCRYPTED_ENCODING) return p;
      const keyId = text(p.metadata?.[KEY_ID_METADATA]);
      const key = this.keys.get(keyId);
      if (!key) {
        throw new TroupeError(
          `a payload is encrypted with key id "${keyId}", which this process does not have (it has ${[...this.keys.keys()].map((k) => `"${k}"`).join(', ')})`,
          'give every client and worker the same TROUPE_PAYLOAD_KEY / TROUPE_PAYLOAD_KEY_ID, and list retired keys in TROUPE_PAYLOAD_OLD_KEYS',
        );
      }
      const data = p.data ?? new Uint8Array();
      if (data.length < IV_BYTES + TAG_BYTES) throw new TroupeError(`an encrypted payload (key id "${keyId}") is truncated: ${data.length} bytes`);
      const decipher = createDecipheriv('aes-256-gcm', key, data.subarray(0, IV_BYTES));
      decipher.setAAD(utf8(keyId));
      decipher.setAuthTag(data.subarray(data.length - TAG_BYTES));
      let plain: Uint8Array;
      try {
        plain = concat([bytes(decipher.update(data.subarray(IV_BYTES, data.length - TAG_BYTES))), bytes(decipher.final())]);
      } catch {
        throw new TroupeError(
          `an encrypted payload does not decrypt with key id "${keyId}": it was altered, or that id names a different key here`,
          'check that TROUPE_PAYLOAD_KEY (or the entry in TROUPE_PAYLOAD_OLD_KEYS) for that id is the key it was written with',
        );
      }
      return temporal.api.common.v1.Payload.decode(plain) as Payload;
    });
  }
}

/** The data converter for clients and workers: the codec when TROUPE_PAYLOAD_KEY is set, else Temporal's default. */
export function payloadDataConverter(keys: PayloadKeysConfig | undefined): { payloadCodecs: PayloadCodec[] } | undefined {
  return keys ? { payloadCodecs: [new AesGcmCodec(keys)] } : undefined;
}
