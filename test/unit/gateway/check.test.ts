/**
 * `troupe doctor`'s gateway lines (checkGateway) on real certificates made here with openssl:
 * loopback by default; each misconfiguration a FAIL naming its variable; for HTTPS the
 * certificate's dates (warned 14 days ahead, failed once expired or not yet valid) and
 * whether TROUPE_GATEWAY_PUBLIC_HOST is one of its names (DNS, wildcard DNS, IP).
 */
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { checkGateway, type GatewayFinding } from '../../../gateway';
import { makeCa, makeLeaf } from '../../../testing/certs';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-gateway-check-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));
makeCa(dir, 'ca');
const gw = makeLeaf(dir, 'gw', 'ca', 'subjectAltName=DNS:gw.example.com,DNS:*.pods.example.com,IP:10.1.2.3\nextendedKeyUsage=serverAuth', 30);
const other = makeLeaf(dir, 'other', 'ca', 'subjectAltName=DNS:other.example.com');
const notAfter = new Date(new X509Certificate(fs.readFileSync(gw.cert)).validTo).getTime();
const notBefore = new Date(new X509Certificate(fs.readFileSync(gw.cert)).validFrom).getTime();
const DAY = 86_400_000;

const tls = (pair = gw) => ({ TROUPE_GATEWAY_TLS_CERT_PATH: pair.cert, TROUPE_GATEWAY_TLS_KEY_PATH: pair.key });
const remote = (env: Record<string, string> = {}) => ({ TROUPE_GATEWAY_HOST: '0.0.0.0', TROUPE_GATEWAY_PUBLIC_HOST: 'gw.example.com', ...tls(), ...env });
/** The one line about `what`. */
const line = (findings: GatewayFinding[], what: string) => {
  const found = findings.filter((f) => f.what === what);
  assert.equal(found.length, 1, `one "${what}" line in ${JSON.stringify(findings)}`);
  return found[0]!;
};

test('loopback without TLS (the default) is one ok line', () => {
  for (const env of [{}, { TROUPE_GATEWAY_HOST: '::1' }]) {
    const findings = checkGateway(env);
    assert.equal(findings.length, 1);
    assert.equal(findings[0]!.status, 'ok');
    assert.match(findings[0]!.detail, /^loopback only: plain HTTP on (127\.0\.0\.1|::1)/);
  }
});

test('each misconfiguration is a single FAIL naming its variable', () => {
  const failure = (env: Record<string, string>) => {
    const findings = checkGateway(env);
    assert.deepEqual(
      findings.map((f) => [f.status, f.what]),
      [['FAIL', 'gateway']],
    );
    return findings[0]!.detail;
  };
  assert.match(failure({ TROUPE_GATEWAY_HOST: '0.0.0.0' }), /^TROUPE_GATEWAY_TLS_CERT_PATH: is required to bind the gateway to 0\.0\.0\.0/);
  assert.match(failure({ TROUPE_GATEWAY_HOST: '10.1.2.3' }), /^TROUPE_GATEWAY_TLS_CERT_PATH: /);
  assert.match(failure({ TROUPE_GATEWAY_TLS_CERT_PATH: gw.cert }), /^TROUPE_GATEWAY_TLS_KEY_PATH: is required/);
  assert.match(failure({ TROUPE_GATEWAY_TLS_KEY_PATH: gw.key }), /^TROUPE_GATEWAY_TLS_CERT_PATH: is required/);
  const missing = path.join(dir, 'missing.pem');
  assert.match(failure(remote({ TROUPE_GATEWAY_TLS_CERT_PATH: missing })), /^TROUPE_GATEWAY_TLS_CERT_PATH: cannot read .*missing\.pem/);
  assert.match(failure(remote({ TROUPE_GATEWAY_TLS_KEY_PATH: missing })), /^TROUPE_GATEWAY_TLS_KEY_PATH: cannot read .*missing\.pem/);
  // a key that is not the certificate's
  assert.match(failure(remote({ TROUPE_GATEWAY_TLS_KEY_PATH: other.key })), /^TROUPE_GATEWAY_TLS_CERT_PATH: .* is not a certificate and its key/);
  assert.match(failure({ TROUPE_GATEWAY_PUBLIC_HOST: 'not a host' }), /^TROUPE_GATEWAY_PUBLIC_HOST: must be a host name/);
});

test('HTTPS with a good certificate: the pair, its dates and the public host are ok', () => {
  const findings = checkGateway(remote(), new Date(notBefore + DAY));
  assert.deepEqual(
    findings.map((f) => [f.what, f.status]),
    [
      ['gateway', 'ok'],
      ['gateway cert', 'ok'],
      ['gateway name', 'ok'],
    ],
  );
  assert.match(line(findings, 'gateway').detail, /^HTTPS on 0\.0\.0\.0/);
  assert.match(line(findings, 'gateway cert').detail, /CN=gw/);
});

test("the public host must be one of the certificate's names: DNS, wildcard DNS or IP", () => {
  const at = new Date(notBefore + DAY);
  const name = (env: Record<string, string>) => line(checkGateway(remote(env), at), 'gateway name');
  for (const host of ['gw.example.com', 'a.pods.example.com', '10.1.2.3']) assert.equal(name({ TROUPE_GATEWAY_PUBLIC_HOST: host }).status, 'ok', host);
  // the bind address stands in for an unset public host
  const bound = line(checkGateway({ TROUPE_GATEWAY_HOST: '10.1.2.3', ...tls() }, at), 'gateway name');
  assert.equal(bound.status, 'ok');
  for (const host of ['other.example.com', 'a.b.pods.example.com', '10.1.2.4']) {
    const f = name({ TROUPE_GATEWAY_PUBLIC_HOST: host });
    assert.equal(f.status, 'FAIL', host);
    assert.ok(f.detail.startsWith(`TROUPE_GATEWAY_PUBLIC_HOST: ${host} is not in the certificate's subjectAltName`), f.detail);
    assert.match(f.detail, /DNS:gw\.example\.com/);
  }
});

test('dates: ok until 14 days before expiry, then warn; expired or not yet valid is a FAIL', () => {
  const cert = (now: number) => line(checkGateway(remote(), new Date(now)), 'gateway cert');
  assert.equal(cert(notAfter - 15 * DAY).status, 'ok');
  const soon = cert(notAfter - 13 * DAY);
  assert.equal(soon.status, 'warn');
  assert.match(soon.detail, /^expires in 13\.0 days/);
  const expired = cert(notAfter + 1000);
  assert.equal(expired.status, 'FAIL');
  assert.match(expired.detail, /^TROUPE_GATEWAY_TLS_CERT_PATH: expired/);
  const early = cert(notBefore - 1000);
  assert.equal(early.status, 'FAIL');
  assert.match(early.detail, /^TROUPE_GATEWAY_TLS_CERT_PATH: not valid yet/);
  // openssl's 2-day certificate, checked now: within the warning
  assert.equal(line(checkGateway(remote({ ...tls(other), TROUPE_GATEWAY_PUBLIC_HOST: 'other.example.com' })), 'gateway cert').status, 'warn');
});
