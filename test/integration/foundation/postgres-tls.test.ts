/**
 * PostgreSQL TLS against the real test server: sslmode=require encrypts (pg_stat_ssl says so),
 * disable does not; verify-ca with the server's own certificate as root passes, verify-full
 * with it fails on the host name (the certificate does not name 127.0.0.1), and the system
 * CAs do not trust it at all. Skipped, saying so, when the server has ssl off. (Debian's
 * snakeoil certificate names "localhost": verify-full to localhost passes, to 127.0.0.1 fails.)
 */
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import * as fs from 'node:fs';
import { test } from 'node:test';
import { connect, describeDbError } from '../../../infra/db';
import { testDatabaseServer } from '../../helpers';

async function usesTls(url: string, tls = {}): Promise<boolean> {
  const sql = connect(url, { max: 1, tls });
  try {
    const [row] = await sql<{ ssl: boolean }[]>`SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`;
    return row!.ssl;
  } finally {
    await sql.end({ timeout: 1 });
  }
}

test('PostgreSQL TLS: sslmode and sslrootcert, from the URL or PG* settings, on a real server', async (t) => {
  const server = await testDatabaseServer();
  const admin = connect(server.url, { max: 1 });
  const { ssl } = (await admin<{ ssl: string }[]>`SHOW ssl`)[0]!;
  const { ssl_cert_file: certFile } = (await admin<{ ssl_cert_file: string }[]>`SHOW ssl_cert_file`)[0]!;
  await admin.end({ timeout: 1 });
  if (ssl !== 'on' || !fs.existsSync(certFile)) {
    t.skip(`the test PostgreSQL server has ssl=${ssl}${ssl === 'on' ? ` and its certificate ${certFile} is not readable here` : ''}`);
    return;
  }
  const url = new URL(server.url);
  const withParams = (params: Record<string, string>, host?: string) => {
    const u = new URL(url.toString());
    if (host) u.hostname = host;
    for (const [k, v] of Object.entries(params)) u.searchParams.set(k, v);
    return u.toString();
  };
  assert.equal(await usesTls(withParams({ sslmode: 'require' })), true, 'sslmode=require encrypts');
  assert.equal(await usesTls(withParams({ sslmode: 'disable' })), false, 'sslmode=disable does not');
  assert.equal(await usesTls(server.url, { sslmode: 'require' }), true, 'PGSSLMODE=require (no URL parameter) encrypts');
  assert.equal(await usesTls(withParams({ sslmode: 'disable' }), { sslmode: 'require' }), false, 'the URL wins over PGSSLMODE');
  assert.equal(await usesTls(withParams({ sslmode: 'verify-ca', sslrootcert: certFile })), true, 'verify-ca with the server certificate as root');

  const refused = async (u: string, pattern: RegExp) => {
    await assert.rejects(usesTls(u), (e: unknown) => {
      const described = describeDbError(e, u);
      assert.match(described.message, pattern);
      assert.match(described.hint ?? '', /sslmode/);
      return true;
    });
  };
  const names = new X509Certificate(fs.readFileSync(certFile, 'utf8')).subjectAltName ?? '';
  if (/DNS:localhost\b/.test(names) && url.hostname === '127.0.0.1') {
    assert.equal(await usesTls(withParams({ sslmode: 'verify-full', sslrootcert: certFile }, 'localhost')), true, 'verify-full to the name on the certificate');
  }
  if (!names.includes(url.hostname)) await refused(withParams({ sslmode: 'verify-full', sslrootcert: certFile }), /TLS: .*(altnames|Hostname|IP)/i);
  await refused(withParams({ sslmode: 'verify-full' }), /TLS: .*(self.signed|certificate)/i);
});
