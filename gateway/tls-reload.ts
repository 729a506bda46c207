/**
 * A renewed gateway certificate is served without restarting the pool worker: the certificate
 * and key files are looked at every `everyMs` (stat only, unless they changed) and a changed pair
 * replaces the server's secure context for new connections (connections already open keep theirs).
 * A pair that does not load (a half-written renewal, a key that is not the certificate's) is not
 * served: the old pair stays and one warning names the files; the next change is tried again.
 * Certificate rotation (cert-manager, a Kubernetes Secret's atomic symlink swap) rewrites both files.
 */
import * as fs from 'node:fs';
import type * as https from 'node:https';
import { createSecureContext } from 'node:tls';
import { errorMessage } from '../infra/errors';

export interface TlsFiles {
  certPath: string;
  keyPath: string;
}

export type TlsCheck = 'unchanged' | 'reloaded' | 'refused';

export interface TlsReloader {
  /** Looks at the files now; what it did. */
  check(): TlsCheck;
  stop(): void;
}

/** What identifies a file's content without reading it; a stat error is part of the stamp, so it warns once. */
function stamp(file: string): string {
  try {
    const s = fs.statSync(file);
    return `${s.ino}:${s.size}:${s.mtimeMs}:${s.ctimeMs}`;
  } catch (err) {
    return `error:${errorMessage(err)}`;
  }
}

export function reloadTls(server: https.Server, files: TlsFiles, opts: { everyMs: number; warn: (message: string) => void }): TlsReloader {
  const stampOf = () => `${stamp(files.certPath)}|${stamp(files.keyPath)}`;
  let seen = stampOf();
  const check = (): TlsCheck => {
    const now = stampOf();
    if (now === seen) return 'unchanged';
    seen = now;
    try {
      const pair = { cert: fs.readFileSync(files.certPath), key: fs.readFileSync(files.keyPath) };
      createSecureContext(pair); // throws on a pair that is not a certificate and its key
      server.setSecureContext(pair);
      return 'reloaded';
    } catch (err) {
      opts.warn(`gateway: the changed ${files.certPath} with ${files.keyPath} is not served (${errorMessage(err)}); still serving the previous certificate`);
      return 'refused';
    }
  };
  const timer = setInterval(check, opts.everyMs);
  timer.unref();
  return { check, stop: () => clearInterval(timer) };
}
