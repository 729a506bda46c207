/**
 * Certificates for tests, made with openssl (P-256, valid two days unless told): a CA, and leaf
 * certificates it signs with the extensions a test needs (subjectAltName, extendedKeyUsage).
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';

const KEY = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

function openssl(args: string[], cwd: string): void {
  const r = spawnSync('openssl', args, { cwd, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`openssl ${args.join(' ')} failed: ${r.stderr || r.error?.message}`);
}

/** A self-signed CA: `<dir>/<name>.pem` and `<name>.key`; returns the certificate's path. */
export function makeCa(dir: string, name: string): string {
  openssl(['req', '-x509', ...KEY, '-keyout', `${name}.key`, '-out', `${name}.pem`, '-days', '2', '-subj', `/CN=${name}`], dir);
  return path.join(dir, `${name}.pem`);
}

/** A certificate signed by the CA `signer` (made by makeCa in `dir`), with the extension lines `ext`, valid from now for `days`: `<dir>/<name>.pem` and `<name>.key`. */
export function makeLeaf(dir: string, name: string, signer: string, ext: string, days = 2): { cert: string; key: string } {
  fs.writeFileSync(path.join(dir, `${name}.ext`), `basicConstraints=CA:FALSE\n${ext}\n`);
  openssl(['req', ...KEY, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`], dir);
  openssl(
    [
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      `${signer}.pem`,
      '-CAkey',
      `${signer}.key`,
      '-CAcreateserial',
      '-out',
      `${name}.pem`,
      '-days',
      String(days),
      '-extfile',
      `${name}.ext`,
    ],
    dir,
  );
  return { cert: path.join(dir, `${name}.pem`), key: path.join(dir, `${name}.key`) };
}
