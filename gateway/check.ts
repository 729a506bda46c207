/**
 * What `troupe doctor` says about the gateway's configuration: read by the code a pool worker
 * starts its gateways with (loadGatewayConfig, gatewayListen), then, for HTTPS, what a remote
 * client will check that the worker does not: the certificate's dates and whether the host
 * in the sessions' baseURLs is one of its names.
 */
import { X509Certificate } from 'node:crypto';
import { isIP } from 'node:net';
import { ConfigError, loadGatewayConfig } from '../infra/config';
import { errorMessage } from '../infra/errors';
import { gatewayListen } from './listen';

export interface GatewayFinding {
  status: 'ok' | 'warn' | 'FAIL';
  what: string;
  detail: string;
}

/** A certificate expiring sooner than this is warned about: time to renew it (gateways serve the renewed files within 30 s: tls-reload.ts). */
export const EXPIRY_WARNING_DAYS = 14;
const DAY_MS = 86_400_000;

/** The gateway's configuration in `env` as a pool worker would start it, at time `now`. */
export function checkGateway(env: NodeJS.ProcessEnv = process.env, now = new Date()): GatewayFinding[] {
  let listen;
  try {
    listen = gatewayListen(loadGatewayConfig(env));
  } catch (err) {
    if (err instanceof ConfigError) return [{ status: 'FAIL', what: 'gateway', detail: err.message }];
    throw err;
  }
  if (!listen.tls)
    return [{ status: 'ok', what: 'gateway', detail: `loopback only: plain HTTP on ${listen.host} (agent code on this host; TROUPE_GATEWAY_HOST)` }];
  const findings: GatewayFinding[] = [
    {
      status: 'ok',
      what: 'gateway',
      detail: `HTTPS on ${listen.host}: certificate and key read and a pair (TROUPE_GATEWAY_TLS_CERT_PATH, TROUPE_GATEWAY_TLS_KEY_PATH)`,
    },
  ];
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(listen.tls.cert); // the first of a chain: the gateway's own
  } catch (err) {
    return [...findings, { status: 'FAIL', what: 'gateway cert', detail: `TROUPE_GATEWAY_TLS_CERT_PATH: not an X.509 certificate: ${errorMessage(err)}` }];
  }
  findings.push(validity(cert, now));
  // Clients verify the baseURL's host against the certificate's names (an IP address against its IP entries).
  const host = listen.publicHost ?? listen.host;
  const covered = isIP(host) ? cert.checkIP(host) : cert.checkHost(host);
  findings.push(
    covered
      ? { status: 'ok', what: 'gateway name', detail: `${host} (TROUPE_GATEWAY_PUBLIC_HOST) is in the certificate's names` }
      : {
          status: 'FAIL',
          what: 'gateway name',
          detail: `TROUPE_GATEWAY_PUBLIC_HOST: ${host} is not in the certificate's subjectAltName (${cert.subjectAltName ?? 'none'}), so clients will refuse the sessions' baseURLs — set it to one of those names, or reissue the certificate with ${isIP(host) ? 'IP' : 'DNS'}:${host}`,
        },
  );
  return findings;
}

function validity(cert: X509Certificate, now: Date): GatewayFinding {
  const from = new Date(cert.validFrom);
  const to = new Date(cert.validTo);
  const dates = `valid ${from.toISOString()} to ${to.toISOString()}`;
  if (now < from) return { status: 'FAIL', what: 'gateway cert', detail: `TROUPE_GATEWAY_TLS_CERT_PATH: not valid yet (${dates})` };
  if (now > to)
    return {
      status: 'FAIL',
      what: 'gateway cert',
      detail: `TROUPE_GATEWAY_TLS_CERT_PATH: expired (${dates}) — renew it (the pool workers serve the renewed files within 30 s)`,
    };
  const days = (to.getTime() - now.getTime()) / DAY_MS;
  if (days < EXPIRY_WARNING_DAYS)
    return {
      status: 'warn',
      what: 'gateway cert',
      detail: `expires in ${days.toFixed(1)} days (${dates}) — renew it (the pool workers serve the renewed files within 30 s)`,
    };
  return { status: 'ok', what: 'gateway cert', detail: `${dates}, subject ${cert.subject.replace(/\n/g, ', ')}` };
}
