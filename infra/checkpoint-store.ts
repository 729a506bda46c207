/**
 * The checkpoint store: version bytes as files under one folder (the state
 * dir's `checkpoints/` by default, or any path a cluster shares, e.g. NFS).
 *
 * A blob is written crash-safely (temp file, fsync, rename, fsync of the
 * folders) *before* the Postgres row that names it commits, so a row never
 * names a torn file; a crash in between leaves an unreferenced file that
 * `troupe gc` removes. Names carry the content's sha256, so two attempts that
 * store different bytes for the same version never overwrite each other.
 * Reads check size and sha256: damaged or replaced files are an error naming
 * the file, never silently wrong weights.
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { TroupeConfig } from './config';
import { TroupeError } from './errors';

/** Where a blob lives: a path relative to the store's folder, with what it must hash to. */
export interface BlobRef {
  file: string;
  size: number;
  sha256: string;
}

export class CheckpointFileError extends TroupeError {
  constructor(
    readonly file: string,
    message: string,
    hint?: string,
  ) {
    super(`checkpoint file ${file}: ${message}`, hint);
  }
}

/** Temp files are `<name>.tmp-<pid>-<n>`: unique per writer without any randomness. */
const TMP_MARK = '.tmp-';
let tmpSeq = 0;

export const sha256Hex = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

async function fsyncDir(dir: string): Promise<void> {
  const h = await fs.open(dir, 'r');
  try {
    await h.sync();
  } finally {
    await h.close();
  }
}

/** Writes `bytes` to `file` so that after a crash `file` is absent or complete. */
export async function writeFileDurably(file: string, bytes: Uint8Array): Promise<void> {
  const dir = path.dirname(file);
  await fs.mkdir(dir, { recursive: true });
  const tmp = `${file}${TMP_MARK}${process.pid}-${tmpSeq++}`;
  const h = await fs.open(tmp, 'wx');
  try {
    for (let off = 0; off < bytes.length;) off += (await h.write(bytes, off, Math.min(bytes.length - off, 1 << 24))).bytesWritten;
    await h.sync();
  } catch (e) {
    await h.close();
    await fs.rm(tmp, { force: true });
    throw e;
  }
  await h.close();
  await fs.rename(tmp, file);
  // The rename, and the folders mkdir may have just made, must survive a crash too.
  await fsyncDir(dir);
  await fsyncDir(path.dirname(dir));
  await fsyncDir(path.dirname(path.dirname(dir)));
}

/** Reads a blob by absolute path and checks it against its recorded size and sha256. */
export async function readVerified(absolute: string, size: number, sha256: string): Promise<Uint8Array> {
  let bytes: Uint8Array;
  try {
    bytes = new Uint8Array(await fs.readFile(absolute));
  } catch (e) {
    throw new CheckpointFileError(
      absolute,
      `cannot be read (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`,
      'is TROUPE_CHECKPOINT_DIR the same path on every host of the cluster?',
    );
  }
  if (bytes.length !== size) throw new CheckpointFileError(absolute, `holds ${bytes.length} bytes, the store recorded ${size} (truncated or replaced)`);
  const actual = sha256Hex(bytes);
  if (actual !== sha256) throw new CheckpointFileError(absolute, `sha256 is ${actual}, the store recorded ${sha256} (damaged or replaced)`);
  return bytes;
}

export interface CheckpointStoreOptions {
  /** Absolute folder of the blobs. */
  dir: string;
  /** Versions whose weights + optimizer state take at most this many bytes stay inline in Postgres. */
  inlineMaxBytes: number;
}

export class CheckpointStore {
  readonly dir: string;
  readonly inlineMaxBytes: number;

  constructor(opts: CheckpointStoreOptions) {
    if (!path.isAbsolute(opts.dir)) throw new TroupeError(`checkpoint store: dir must be absolute (got ${opts.dir})`);
    this.dir = opts.dir;
    this.inlineMaxBytes = opts.inlineMaxBytes;
  }

  /** Whether a version of this many bytes goes to files. */
  wantsFiles(bytes: number): boolean {
    return bytes > this.inlineMaxBytes;
  }

  /** Stores one blob of a version (`kind`: weights | optimizer) and returns its reference. */
  async put(runId: string, model: string, version: number, kind: string, bytes: Uint8Array): Promise<BlobRef> {
    const sha256 = sha256Hex(bytes);
    const file = path.posix.join(encodeURIComponent(runId), encodeURIComponent(model), `v${version}-${kind}-${sha256.slice(0, 16)}.bin`);
    await writeFileDurably(this.absolute(file), bytes);
    return { file, size: bytes.length, sha256 };
  }

  absolute(file: string): string {
    return path.join(this.dir, ...file.split('/'));
  }

  /** The reference an engine sharing this path is given (protocol: URI + sha256 + size). */
  uri(file: string): string {
    return pathToFileURL(this.absolute(file)).href;
  }

  read(ref: BlobRef): Promise<Uint8Array> {
    return readVerified(this.absolute(ref.file), ref.size, ref.sha256);
  }

  async remove(file: string): Promise<void> {
    await fs.rm(this.absolute(file), { force: true });
  }

  /**
   * Every file under the store (relative paths), temp files included, with
   * modification times: what gc compares with the rows that name files.
   */
  async list(): Promise<Array<{ file: string; mtimeMs: number; temp: boolean }>> {
    const out: Array<{ file: string; mtimeMs: number; temp: boolean }> = [];
    const walk = async (rel: string) => {
      let entries;
      try {
        entries = await fs.readdir(path.join(this.dir, rel), { withFileTypes: true });
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
        throw e;
      }
      for (const e of entries) {
        const child = rel ? `${rel}/${e.name}` : e.name;
        if (e.isDirectory()) await walk(child);
        else if (e.isFile()) out.push({ file: child, mtimeMs: (await fs.stat(this.absolute(child))).mtimeMs, temp: e.name.includes(TMP_MARK) });
      }
    };
    await walk('');
    return out;
  }
}

/** A `file://` reference as a local path; anything else is refused with the field named. */
export function pathOfUri(uri: string, field: string): string {
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    throw new TroupeError(`${field}: not a URI (${uri})`);
  }
  if (url.protocol !== 'file:') throw new TroupeError(`${field}: only file:// references are supported (got ${url.protocol}//)`);
  return fileURLToPath(url);
}

/** The store a configuration names (TROUPE_CHECKPOINT_DIR, TROUPE_CHECKPOINT_INLINE_MAX_BYTES). */
export function checkpointStoreOf(config: Pick<TroupeConfig, 'checkpointDir' | 'checkpointInlineMaxBytes'>): CheckpointStore {
  return new CheckpointStore({ dir: config.checkpointDir, inlineMaxBytes: config.checkpointInlineMaxBytes });
}
