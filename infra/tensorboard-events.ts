/**
 * TensorBoard's event file format, written and read back without TensorFlow: a file of
 * TFRecords (u64 length, masked CRC32C of the length, the bytes, masked CRC32C of the bytes),
 * each an `Event` protobuf (tensorflow/core/util/event.proto): wall_time (1, double),
 * step (2, int64), and either file_version (3, string) or a summary (5) of values
 * (tag 1, simple_value 2 as float32, tensor 8, metadata 9). Text goes as the `text` plugin
 * does it: a DT_STRING tensor. Only what Troupe writes is encoded; reading gives back the
 * (step, tag) of every scalar and text point, which is all an appender needs to skip what
 * a file already holds.
 */

/** One point of an event file: a scalar (`value`) or a text (`text`) at (step, tag). */
export type EventPoint = { step: number; wallTime: number; tag: string } & ({ value: number } | { text: string });

/** The first record of every event file. */
export const FILE_VERSION = 'brain.Event:2';

// ---- CRC32C (Castagnoli), masked as TFRecord does ----

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

export function crc32c(bytes: Uint8Array): number {
  let c = 0xffffffff;
  for (const b of bytes) c = (CRC_TABLE[(c ^ b) & 0xff] ?? 0) ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

export function maskedCrc32c(bytes: Uint8Array): number {
  const c = crc32c(bytes);
  return (((c >>> 15) | (c << 17)) + 0xa282ead8) >>> 0;
}

// ---- protobuf, the few wire types used ----

class ProtoWriter {
  private readonly parts: Buffer[] = [];

  private varint(n: bigint): void {
    const out: number[] = [];
    let v = BigInt.asUintN(64, n);
    while (v >= 0x80n) {
      out.push(Number(v & 0x7fn) | 0x80);
      v >>= 7n;
    }
    out.push(Number(v));
    this.parts.push(Buffer.from(out));
  }

  private key(field: number, wire: number): void {
    this.varint(BigInt((field << 3) | wire));
  }

  int(field: number, n: number): this {
    this.key(field, 0);
    this.varint(BigInt(n));
    return this;
  }

  double(field: number, x: number): this {
    this.key(field, 1);
    const b = Buffer.alloc(8);
    b.writeDoubleLE(x);
    this.parts.push(b);
    return this;
  }

  float(field: number, x: number): this {
    this.key(field, 5);
    const b = Buffer.alloc(4);
    b.writeFloatLE(x);
    this.parts.push(b);
    return this;
  }

  bytes(field: number, data: Uint8Array | string): this {
    const b = typeof data === 'string' ? Buffer.from(data, 'utf8') : Buffer.from(data);
    this.key(field, 2);
    this.varint(BigInt(b.length));
    this.parts.push(b);
    return this;
  }

  message(field: number, inner: ProtoWriter): this {
    return this.bytes(field, inner.finish());
  }

  finish(): Buffer {
    return Buffer.concat(this.parts);
  }
}

type Field = { field: number; varint?: bigint; fixed64?: Buffer; fixed32?: Buffer; bytes?: Buffer };

function fieldsOf(buf: Buffer): Field[] {
  const out: Field[] = [];
  let i = 0;
  const varint = (): bigint => {
    let v = 0n;
    for (let shift = 0n; ; shift += 7n) {
      if (i >= buf.length) throw new Error('truncated varint');
      const b = buf.readUInt8(i++);
      v |= BigInt(b & 0x7f) << shift;
      if (b < 0x80) return v;
    }
  };
  while (i < buf.length) {
    const key = Number(varint());
    const field = key >> 3;
    const wire = key & 7;
    if (wire === 0) out.push({ field, varint: varint() });
    else if (wire === 1) out.push({ field, fixed64: buf.subarray(i, (i += 8)) });
    else if (wire === 5) out.push({ field, fixed32: buf.subarray(i, (i += 4)) });
    else if (wire === 2) {
      const n = Number(varint());
      out.push({ field, bytes: buf.subarray(i, (i += n)) });
    } else throw new Error(`unsupported wire type ${wire}`);
    if (i > buf.length) throw new Error('truncated field');
  }
  return out;
}

// ---- events ----

const DT_STRING = 7;

function summaryValue(p: EventPoint): ProtoWriter {
  const v = new ProtoWriter().bytes(1, p.tag);
  if ('value' in p) return v.float(2, p.value);
  // The text plugin's layout: plugin_data { plugin_name: "text" } and a scalar DT_STRING tensor.
  const tensor = new ProtoWriter().int(1, DT_STRING).message(2, new ProtoWriter()).bytes(8, p.text);
  return v.message(8, tensor).message(9, new ProtoWriter().message(1, new ProtoWriter().bytes(1, 'text')));
}

/** The Event bytes of one point, or of the file-version record. */
export function encodeEvent(e: EventPoint | { fileVersion: string; wallTime: number }): Buffer {
  const w = new ProtoWriter().double(1, e.wallTime);
  if ('fileVersion' in e) return w.bytes(3, e.fileVersion).finish();
  return w
    .int(2, e.step)
    .message(5, new ProtoWriter().message(1, summaryValue(e)))
    .finish();
}

/** One TFRecord around `data`. */
export function frameRecord(data: Uint8Array): Buffer {
  const head = Buffer.alloc(12);
  head.writeBigUInt64LE(BigInt(data.length), 0);
  head.writeUInt32LE(maskedCrc32c(head.subarray(0, 8)), 8);
  const tail = Buffer.alloc(4);
  tail.writeUInt32LE(maskedCrc32c(data), 0);
  return Buffer.concat([head, data, tail]);
}

/** The (step, tag) points of one Event's bytes; none for a file-version record. */
export function decodeEvent(data: Buffer): Array<{ step: number; tag: string }> {
  let step = 0;
  const tags: string[] = [];
  for (const f of fieldsOf(data)) {
    if (f.field === 2 && f.varint !== undefined) step = Number(BigInt.asIntN(64, f.varint));
    if (f.field === 5 && f.bytes)
      for (const value of fieldsOf(f.bytes))
        if (value.field === 1 && value.bytes) {
          const tag = fieldsOf(value.bytes).find((x) => x.field === 1)?.bytes;
          if (tag) tags.push(tag.toString('utf8'));
        }
  }
  return tags.map((tag) => ({ step, tag }));
}

/**
 * The records of an event file's bytes, in order, and the offset where the last whole,
 * checksum-correct record ends: what follows it (a write cut short) is to be cut off.
 */
export function readRecords(buf: Buffer): { records: Buffer[]; validBytes: number } {
  const records: Buffer[] = [];
  let at = 0;
  while (at + 12 <= buf.length) {
    const len = buf.readBigUInt64LE(at);
    if (buf.readUInt32LE(at + 8) !== maskedCrc32c(buf.subarray(at, at + 8))) break;
    const end = at + 12 + Number(len) + 4;
    if (end > buf.length) break;
    const data = buf.subarray(at + 12, end - 4);
    if (buf.readUInt32LE(end - 4) !== maskedCrc32c(data)) break;
    records.push(data);
    at = end;
  }
  return { records, validBytes: at };
}
