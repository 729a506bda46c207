/**
 * Where a gateway listens, from the deployment's configuration (TROUPE_GATEWAY_* in
 * infra/config.ts): the bind address, the host its sessions' baseURLs carry, and the
 * certificate and key it serves HTTPS with, read here so that an unreadable file is
 * reported naming its variable. The port is always an ephemeral one (one server per
 * episode thread: a fixed port would collide); each baseURL carries it.
 */
import { readConfigFile, type GatewayConfig } from '../infra/config';

export interface GatewayListen {
  /** Address to bind. */
  host: string;
  /** Host in the sessions' baseURLs (default: `host`). */
  publicHost?: string;
  /** PEM certificate (chain) and key: HTTPS; absent: plain HTTP (loopback only, loadConfig checks). */
  tls?: { cert: Buffer; key: Buffer };
}

export function gatewayListen(config: GatewayConfig): GatewayListen {
  return {
    host: config.host,
    publicHost: config.publicHost,
    tls: config.tls && {
      cert: readConfigFile('TROUPE_GATEWAY_TLS_CERT_PATH', config.tls.certPath),
      key: readConfigFile('TROUPE_GATEWAY_TLS_KEY_PATH', config.tls.keyPath),
    },
  };
}
