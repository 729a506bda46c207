/**
 * Where a gateway listens, from the deployment's configuration (TROUPE_GATEWAY_* in
 * infra/config.ts): the bind address, the host its sessions' baseURLs carry, and the
 * certificate and key it serves HTTPS with, read and tried here so that an unreadable
 * file, or a pair that is not a certificate and its key, is reported naming its variable. The port is always an ephemeral one (one server per
 * episode thread: a fixed port would collide); each baseURL carries it.
 */
import { createSecureContext } from 'node:tls';
import { ConfigError, readConfigFile, type GatewayConfig } from '../infra/config';
import { errorMessage } from '../infra/errors';
import type { TlsFiles } from './tls-reload';

export interface GatewayListen {
  /** Address to bind. */
  host: string;
  /** Host in the sessions' baseURLs (default: `host`). */
  publicHost?: string;
  /**
   * PEM certificate (chain) and key: HTTPS; absent: plain HTTP (loopback only, loadConfig checks).
   * `files`: where they were read; a renewed pair there is served without a restart (tls-reload.ts).
   */
  tls?: { cert: Buffer; key: Buffer; files?: TlsFiles };
}

export function gatewayListen(config: GatewayConfig): GatewayListen {
  if (!config.tls) return { host: config.host, publicHost: config.publicHost };
  const tls = {
    cert: readConfigFile('TROUPE_GATEWAY_TLS_CERT_PATH', config.tls.certPath),
    key: readConfigFile('TROUPE_GATEWAY_TLS_KEY_PATH', config.tls.keyPath),
  };
  try {
    createSecureContext(tls);
  } catch (err) {
    throw new ConfigError(
      'TROUPE_GATEWAY_TLS_CERT_PATH',
      `${config.tls.certPath} with ${config.tls.keyPath} (TROUPE_GATEWAY_TLS_KEY_PATH) is not a certificate and its key: ${errorMessage(err)}`,
      'point them at the PEM certificate (chain first) and its unencrypted private key',
    );
  }
  return { host: config.host, publicHost: config.publicHost, tls: { ...tls, files: { certPath: config.tls.certPath, keyPath: config.tls.keyPath } } };
}
