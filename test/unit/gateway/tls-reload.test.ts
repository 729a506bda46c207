/**
 * A renewed gateway certificate is served without a restart (gateway/tls-reload.ts): real
 * certificates from openssl, a real HTTPS gateway configured by TROUPE_GATEWAY_TLS_*, and real TLS
 * handshakes reading the certificate it serves. The files are replaced as a Secret rotation does
 * (write beside, rename over).
 */
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, it } from 'node:test';
import * as tls from 'node:tls';
import { GatewayServer, gatewayListen } from '../../../gateway';
import { loadConfig } from '../../../infra/config';
import { makeCa, makeLeaf } from '../../../testing/certs';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-gateway-reload-'));
const ca = makeCa(dir, 'ca');
const SAN = 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth';
const first = makeLeaf(dir, 'first', 'ca', SAN);
const renewed = makeLeaf(dir, 'renewed', 'ca', SAN);
const fingerprint = (pem: string) => new X509Certificate(fs.readFileSync(pem)).fingerprint256;

/** Replaces `to` with `from`'s bytes atomically. */
function install(from: string, to: string): void {
  fs.copyFileSync(from, `${to}.tmp`);
  fs.renameSync(`${to}.tmp`, to);
}

/** The certificate a new TLS connection to the gateway is served (verified against the CA). */
function served(gateway: GatewayServer): Promise<string> {
  const { port } = new URL(gateway.origin);
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port: Number(port), ca: fs.readFileSync(ca) }, () => {
      resolve(socket.getPeerCertificate().fingerprint256);
      socket.end();
    });
    socket.once('error', reject);
  });
}

/** A gateway on `cert`/`key` copies made for it, as a deployment configures one. */
async function gatewayOn(name: string, tlsCheckEveryMs: number) {
  const files = { cert: path.join(dir, `${name}-serving.pem`), key: path.join(dir, `${name}-serving.key`) };
  install(first.cert, files.cert);
  install(first.key, files.key);
  const env = { TROUPE_GATEWAY_TLS_CERT_PATH: files.cert, TROUPE_GATEWAY_TLS_KEY_PATH: files.key };
  return { files, gateway: await GatewayServer.start(gatewayListen(loadConfig(env).gateway), { tlsCheckEveryMs }) };
}

describe('gateway certificate renewal', () => {
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('serves a renewed pair to new connections; a pair that does not match is refused and the previous one kept', async () => {
    const { files, gateway } = await gatewayOn('manual', 3_600_000); // the test looks, not the timer
    const warnings: string[] = [];
    const write = process.stderr.write.bind(process.stderr);
    process.stderr.write = ((chunk: string | Uint8Array, ...rest: never[]) => {
      if (String(chunk).includes('gateway_tls_refused')) warnings.push(String(chunk));
      return write(chunk, ...rest);
    }) as typeof process.stderr.write;
    try {
      assert.equal(await served(gateway), fingerprint(first.cert));
      assert.equal(gateway.tls!.check(), 'unchanged');

      install(renewed.cert, files.cert);
      install(renewed.key, files.key);
      assert.equal(await served(gateway), fingerprint(first.cert), 'nothing changes before the files are looked at');
      assert.equal(gateway.tls!.check(), 'reloaded');
      assert.equal(await served(gateway), fingerprint(renewed.cert));
      assert.equal(gateway.tls!.check(), 'unchanged');

      // half a renewal: the first certificate with the renewed key
      install(first.cert, files.cert);
      assert.equal(gateway.tls!.check(), 'refused');
      assert.equal(await served(gateway), fingerprint(renewed.cert));
      assert.equal(warnings.length, 1);
      assert.match(warnings[0]!, new RegExp(`${files.cert.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} with .*-serving\\.key is not served`));
      assert.equal(gateway.tls!.check(), 'unchanged', 'the same bad pair is not tried (or warned about) again');

      // the rest of it arrives
      install(first.key, files.key);
      assert.equal(gateway.tls!.check(), 'reloaded');
      assert.equal(await served(gateway), fingerprint(first.cert));
      assert.equal(warnings.length, 1);
    } finally {
      process.stderr.write = write;
      await gateway.close();
    }
  });

  it('looks at the files on its own every tlsCheckEveryMs', async () => {
    const { files, gateway } = await gatewayOn('timer', 50);
    try {
      install(renewed.cert, files.cert);
      install(renewed.key, files.key);
      const deadline = Date.now() + 10_000;
      let now = await served(gateway);
      while (now !== fingerprint(renewed.cert) && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
        now = await served(gateway);
      }
      assert.equal(now, fingerprint(renewed.cert));
    } finally {
      await gateway.close();
    }
  });

  it('a plain HTTP gateway has nothing to reload', async () => {
    const gateway = await GatewayServer.start();
    try {
      assert.equal(gateway.tls, undefined);
    } finally {
      await gateway.close();
    }
  });
});
