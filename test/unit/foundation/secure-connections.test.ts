import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { ConfigError, loadConfig } from '../../../infra/config';
import { postgresTls } from '../../../infra/db';
import { temporalConnectionOptions } from '../../../infra/temporal-connection';
import { gatewayListen } from '../../../gateway';
import { makeCa, makeLeaf } from '../../../testing/certs';

function configError(env: Record<string, string>): ConfigError {
  try {
    const c = loadConfig(env);
    temporalConnectionOptions(c); // reads the PEM files
  } catch (err) {
    assert.ok(err instanceof ConfigError, `expected ConfigError, got ${err}`);
    return err;
  }
  assert.fail(`expected ${JSON.stringify(env)} to be refused`);
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-tls-unit-'));
const pem = (name: string) => {
  const p = path.join(dir, name);
  fs.writeFileSync(p, `-----BEGIN ${name}-----\n`);
  return p;
};
const ca = pem('ca.pem');
const crt = pem('client.pem');
const key = pem('client.key');
test.after(() => fs.rmSync(dir, { recursive: true, force: true }));

test('Temporal: no TLS settings → a plain connection to the address', () => {
  const c = loadConfig({ TEMPORAL_ADDRESS: 't:7233' });
  assert.equal(c.temporalTls.enabled, false);
  assert.deepEqual(temporalConnectionOptions(c), { address: 't:7233' });
});

test('Temporal: CA, client pair and server name are read into the connection options; any of them turns TLS on', () => {
  const c = loadConfig({
    TEMPORAL_ADDRESS: 't:7233',
    TEMPORAL_TLS_SERVER_CA_CERT_PATH: ca,
    TEMPORAL_TLS_CLIENT_CERT_PATH: crt,
    TEMPORAL_TLS_CLIENT_KEY_PATH: key,
    TEMPORAL_TLS_SERVER_NAME: 'temporal.internal',
  });
  const o = temporalConnectionOptions(c);
  assert.equal(o.address, 't:7233');
  assert.equal(o.tls?.serverNameOverride, 'temporal.internal');
  const txt = (b?: Uint8Array) => new TextDecoder().decode(b);
  assert.equal(txt(o.tls?.serverRootCACertificate), '-----BEGIN ca.pem-----\n');
  assert.equal(txt(o.tls?.clientCertPair?.crt), '-----BEGIN client.pem-----\n');
  assert.equal(txt(o.tls?.clientCertPair?.key), '-----BEGIN client.key-----\n');
  assert.equal(o.apiKey, undefined);
  assert.equal(loadConfig({ TEMPORAL_TLS_SERVER_NAME: 'x' }).temporalTls.enabled, true);
  assert.equal(loadConfig({ TEMPORAL_TLS: 'true' }).temporalTls.enabled, true);
  assert.equal(loadConfig({ TEMPORAL_TLS: 'false', TEMPORAL_TLS_SERVER_NAME: 'x' }).temporalTls.enabled, false);
});

test('Temporal: an API key implies TLS with the system CAs (Temporal Cloud)', () => {
  const o = temporalConnectionOptions(loadConfig({ TEMPORAL_ADDRESS: 'ns.acct.tmprl.cloud:7233', TEMPORAL_API_KEY: 'k-123' }));
  assert.equal(o.apiKey, 'k-123');
  assert.deepEqual(o.tls, { serverNameOverride: undefined, serverRootCACertificate: undefined, clientCertPair: undefined });
});

test('Temporal: bad TLS settings are refused naming the variable', () => {
  assert.equal(configError({ TEMPORAL_TLS_CLIENT_CERT_PATH: crt }).variable, 'TEMPORAL_TLS_CLIENT_KEY_PATH');
  assert.equal(configError({ TEMPORAL_TLS_CLIENT_KEY_PATH: key }).variable, 'TEMPORAL_TLS_CLIENT_CERT_PATH');
  assert.equal(configError({ TEMPORAL_TLS: 'yes please' }).variable, 'TEMPORAL_TLS');
  const missing = configError({ TEMPORAL_TLS_SERVER_CA_CERT_PATH: path.join(dir, 'nope.pem') });
  assert.equal(missing.variable, 'TEMPORAL_TLS_SERVER_CA_CERT_PATH');
  assert.match(missing.message, /cannot read .*nope\.pem/);
});

test('payload keys: 32 bytes of base64, an id, old keys as id=key; anything else names the variable', () => {
  const k = Buffer.alloc(32, 7).toString('base64');
  const c = loadConfig({ TROUPE_PAYLOAD_KEY: k, TROUPE_PAYLOAD_OLD_KEYS: `old=${Buffer.alloc(32, 8).toString('base64')}` });
  assert.equal(c.payloadKeys?.keyId, 'default');
  assert.deepEqual([...c.payloadKeys!.key], Array(32).fill(7));
  assert.deepEqual(Object.keys(c.payloadKeys!.oldKeys), ['old']);
  assert.equal(loadConfig({}).payloadKeys, undefined);
  assert.equal(configError({ TROUPE_PAYLOAD_KEY: Buffer.alloc(16).toString('base64') }).variable, 'TROUPE_PAYLOAD_KEY');
  assert.equal(configError({ TROUPE_PAYLOAD_KEY: 'not base64!' }).variable, 'TROUPE_PAYLOAD_KEY');
  assert.equal(configError({ TROUPE_PAYLOAD_KEY: k, TROUPE_PAYLOAD_OLD_KEYS: 'justakey' }).variable, 'TROUPE_PAYLOAD_OLD_KEYS');
  assert.equal(configError({ TROUPE_PAYLOAD_KEY: k, TROUPE_PAYLOAD_OLD_KEYS: `a=${Buffer.alloc(31).toString('base64')}` }).variable, 'TROUPE_PAYLOAD_OLD_KEYS');
  assert.equal(configError({ TROUPE_PAYLOAD_OLD_KEYS: `a=${k}` }).variable, 'TROUPE_PAYLOAD_KEY');
});

test('PostgreSQL: libpq sslmodes map to postgres.js ssl options; the URL wins over PG* variables and loses its TLS parameters', () => {
  const url = 'postgres://u:p@db.internal:5432/troupe';
  assert.deepEqual(postgresTls(url, {}), { url });
  assert.deepEqual(postgresTls(`${url}?sslmode=disable`, {}), { url, ssl: false });
  assert.deepEqual(postgresTls(url, { sslmode: 'prefer' }), { url, ssl: 'prefer' });
  assert.deepEqual(postgresTls(`${url}?sslmode=require`, { sslmode: 'disable' }), { url, ssl: { rejectUnauthorized: false } });
  const full = postgresTls(`${url}?sslmode=verify-full&sslrootcert=${encodeURIComponent(ca)}&application_name=x`, {});
  assert.equal(full.url, `${url}?application_name=x`);
  assert.ok(typeof full.ssl === 'object');
  assert.equal(full.ssl.rejectUnauthorized, true);
  assert.equal(full.ssl.ca?.toString(), '-----BEGIN ca.pem-----\n');
  // verify-full checks the URL's host (also for an IP address, where Node alone would check "localhost").
  const cert = (san: string) => ({ subject: { CN: 'x' }, subjectaltname: san }) as never;
  assert.equal(full.ssl.checkServerIdentity?.('localhost', cert('DNS:db.internal')), undefined);
  assert.match(String(full.ssl.checkServerIdentity?.('localhost', cert('DNS:localhost'))), /db\.internal/);
  const ip = postgresTls('postgres://u@127.0.0.1/db?sslmode=verify-full', {});
  assert.ok(typeof ip.ssl === 'object');
  assert.ok(ip.ssl.checkServerIdentity?.('localhost', cert('DNS:localhost')) instanceof Error, 'an IP address is not "localhost"');
  assert.equal(ip.ssl.checkServerIdentity?.('localhost', cert('IP Address:127.0.0.1')), undefined);
  const vca = postgresTls(url, { sslmode: 'verify-ca', sslrootcert: ca, sslcert: crt, sslkey: key });
  assert.ok(typeof vca.ssl === 'object');
  assert.equal(vca.ssl.checkServerIdentity?.('db.internal', {} as never), undefined, 'verify-ca skips the host name check');
  assert.equal(vca.ssl.cert?.toString(), '-----BEGIN client.pem-----\n');
  assert.equal(vca.ssl.key?.toString(), '-----BEGIN client.key-----\n');
  // require with a root certificate verifies the chain (libpq's rule).
  const req = postgresTls(url, { sslmode: 'require', sslrootcert: ca });
  assert.ok(typeof req.ssl === 'object' && req.ssl.rejectUnauthorized === true && req.ssl.checkServerIdentity);
});

test('PostgreSQL: bad TLS settings name where they came from', () => {
  const url = 'postgres://u@h/db';
  const named = (f: () => unknown) => {
    try {
      f();
    } catch (e) {
      assert.ok(e instanceof ConfigError, String(e));
      return e.variable;
    }
    assert.fail('expected a ConfigError');
  };
  assert.equal(
    named(() => postgresTls(`${url}?sslmode=strict`, {})),
    'DATABASE_URL (sslmode=)',
  );
  assert.equal(
    named(() => postgresTls(url, { sslmode: 'verify-full', sslrootcert: '/nonexistent/ca.pem' })),
    'PGSSLROOTCERT',
  );
  assert.equal(
    named(() => postgresTls(url, { sslcert: crt })),
    'PGSSLKEY',
  );
  assert.equal(
    named(() => loadConfig({ PGSSLMODE: 'on' })),
    'PGSSLMODE',
  );
});

/** The ConfigError loadConfig or the gateway's start-up (gatewayListen reads the PEM files) throws for env. */
function gatewayError(env: Record<string, string>): ConfigError {
  try {
    gatewayListen(loadConfig(env).gateway);
  } catch (err) {
    assert.ok(err instanceof ConfigError, `expected ConfigError, got ${err}`);
    return err;
  }
  assert.fail(`expected ${JSON.stringify(env)} to be refused`);
}

// a real certificate and key for the gateway (it tries the pair), and a CA key that is not the certificate's
makeCa(dir, 'gw-ca');
const gw = makeLeaf(dir, 'gw', 'gw-ca', 'subjectAltName=DNS:gw.example.com');

test('gateway: loopback and plain HTTP by default; a certificate pair turns HTTPS on and is read at start', () => {
  assert.deepEqual(loadConfig({}).gateway, { host: '127.0.0.1', publicHost: '127.0.0.1', tls: undefined });
  assert.deepEqual(gatewayListen(loadConfig({}).gateway), { host: '127.0.0.1', publicHost: '127.0.0.1' });
  const tls = { TROUPE_GATEWAY_TLS_CERT_PATH: gw.cert, TROUPE_GATEWAY_TLS_KEY_PATH: gw.key };
  const listen = gatewayListen(loadConfig({ ...tls, TROUPE_GATEWAY_HOST: '10.1.2.3' }).gateway);
  assert.equal(listen.host, '10.1.2.3');
  assert.equal(listen.publicHost, '10.1.2.3');
  assert.equal(listen.tls?.cert.toString(), fs.readFileSync(gw.cert, 'utf8'));
  assert.equal(listen.tls?.key.toString(), fs.readFileSync(gw.key, 'utf8'));
  // a wildcard bind advertises this machine's name, unless told another
  assert.equal(loadConfig({ ...tls, TROUPE_GATEWAY_HOST: '0.0.0.0' }).gateway.publicHost, os.hostname());
  assert.equal(loadConfig({ ...tls, TROUPE_GATEWAY_HOST: '::' }).gateway.publicHost, os.hostname());
  assert.equal(loadConfig({ ...tls, TROUPE_GATEWAY_HOST: '::', TROUPE_GATEWAY_PUBLIC_HOST: 'gw.example.com' }).gateway.publicHost, 'gw.example.com');
  // other loopback addresses need no TLS
  for (const host of ['localhost', '127.0.0.2', '::1']) assert.equal(loadConfig({ TROUPE_GATEWAY_HOST: host }).gateway.host, host);
});

test('gateway: bad settings are refused naming the variable; another address without TLS names the certificate', () => {
  assert.equal(gatewayError({ TROUPE_GATEWAY_TLS_CERT_PATH: crt }).variable, 'TROUPE_GATEWAY_TLS_KEY_PATH');
  assert.equal(gatewayError({ TROUPE_GATEWAY_TLS_KEY_PATH: key }).variable, 'TROUPE_GATEWAY_TLS_CERT_PATH');
  for (const host of ['0.0.0.0', '::', '10.1.2.3', 'gw.example.com']) {
    const e = gatewayError({ TROUPE_GATEWAY_HOST: host });
    assert.equal(e.variable, 'TROUPE_GATEWAY_TLS_CERT_PATH');
    assert.match(e.message, new RegExp(`bind the gateway to ${host.replace(/\./g, '\\.')} \\(TROUPE_GATEWAY_HOST\\)`));
  }
  assert.equal(gatewayError({ TROUPE_GATEWAY_HOST: 'https://gw:443' }).variable, 'TROUPE_GATEWAY_HOST');
  assert.equal(gatewayError({ TROUPE_GATEWAY_HOST: '[::1]' }).variable, 'TROUPE_GATEWAY_HOST');
  assert.equal(gatewayError({ TROUPE_GATEWAY_PUBLIC_HOST: 'gw.example.com/x' }).variable, 'TROUPE_GATEWAY_PUBLIC_HOST');
  const missing = gatewayError({ TROUPE_GATEWAY_TLS_CERT_PATH: path.join(dir, 'nope.pem'), TROUPE_GATEWAY_TLS_KEY_PATH: gw.key });
  assert.equal(missing.variable, 'TROUPE_GATEWAY_TLS_CERT_PATH');
  assert.match(missing.message, /cannot read .*nope\.pem/);
  assert.equal(gatewayError({ TROUPE_GATEWAY_TLS_CERT_PATH: gw.cert, TROUPE_GATEWAY_TLS_KEY_PATH: dir + '/none.key' }).variable, 'TROUPE_GATEWAY_TLS_KEY_PATH');
  // readable, but not a certificate and its key
  const wrongKey = gatewayError({ TROUPE_GATEWAY_TLS_CERT_PATH: gw.cert, TROUPE_GATEWAY_TLS_KEY_PATH: path.join(dir, 'gw-ca.key') });
  assert.equal(wrongKey.variable, 'TROUPE_GATEWAY_TLS_CERT_PATH');
  assert.match(wrongKey.message, /gw-ca\.key \(TROUPE_GATEWAY_TLS_KEY_PATH\) is not a certificate and its key: .*key values mismatch/);
  assert.equal(gatewayError({ TROUPE_GATEWAY_TLS_CERT_PATH: crt, TROUPE_GATEWAY_TLS_KEY_PATH: key }).variable, 'TROUPE_GATEWAY_TLS_CERT_PATH');
});
