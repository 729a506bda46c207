// Connections: the one place clients and workers connect to Temporal (address, TLS, API key and
// payload codec from the project's config). Bringing a server up is the stack's (stack/temporal.ts).
import { Client, Connection } from '@temporalio/client';
import type { NativeConnection } from '@temporalio/worker';
import { payloadDataConverter } from './codec';
import { ConfigError, type TroupeConfig, loadConfig, readConfigFile, temporalAddressOf } from './config';
import { TroupeError, errorMessage } from './errors';

export interface TemporalConnectionOptions {
  address: string;
  tls?: {
    serverNameOverride?: string;
    serverRootCACertificate?: Uint8Array;
    clientCertPair?: { crt: Uint8Array; key: Uint8Array };
  };
  apiKey?: string;
}

const readPem = (variable: string, file: string) => new Uint8Array(readConfigFile(variable, file));

/** Address, TLS (server CA, client certificate for mTLS, server name) and API key for clients and workers alike. */
export function temporalConnectionOptions(config: TroupeConfig, address = temporalAddressOf(config)): TemporalConnectionOptions {
  const t = config.temporalTls;
  if (!t.enabled) return { address };
  return {
    address,
    tls: {
      serverNameOverride: t.serverName,
      serverRootCACertificate: t.caPath ? readPem('TEMPORAL_TLS_SERVER_CA_CERT_PATH', t.caPath) : undefined,
      clientCertPair:
        t.certPath && t.keyPath
          ? { crt: readPem('TEMPORAL_TLS_CLIENT_CERT_PATH', t.certPath), key: readPem('TEMPORAL_TLS_CLIENT_KEY_PATH', t.keyPath) }
          : undefined,
    },
    apiKey: t.apiKey,
  };
}

/** What to do when Temporal does not answer: check the TLS settings, or start the local server. */
export const connectHint = (config: TroupeConfig) =>
  config.temporalTls.enabled
    ? 'check TEMPORAL_ADDRESS and the TLS settings (TEMPORAL_TLS_SERVER_CA_CERT_PATH, TEMPORAL_TLS_CLIENT_CERT_PATH/KEY_PATH, TEMPORAL_TLS_SERVER_NAME, TEMPORAL_API_KEY)'
    : 'start it with `npx troupe up`, or set TEMPORAL_ADDRESS to a running server';

/** Connect a client Connection; unreachable → one clear line plus what to do. */
export async function connectTemporal(address: string, what = 'Temporal', config: TroupeConfig = loadConfig()): Promise<Connection> {
  try {
    return await Connection.connect({ ...temporalConnectionOptions(config, address), connectTimeout: 5000 });
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    throw new TroupeError(`cannot reach ${what} at ${address}: ${errorMessage(err)}`, connectHint(config));
  }
}

/** A worker's connection, with the same options as a client's. */
export async function connectTemporalWorker(address: string, config: TroupeConfig = loadConfig()): Promise<NativeConnection> {
  // Loaded here: the worker package's native bridge is for workers, not every CLI command.
  const { NativeConnection } = await import('@temporalio/worker');
  return NativeConnection.connect(temporalConnectionOptions(config, address));
}

/** A client on `connection` that encodes payloads like the workers do (the payload codec when configured). */
export function temporalClient(connection: Connection, namespace: string, config: TroupeConfig = loadConfig()): Client {
  return new Client({ connection, namespace, dataConverter: payloadDataConverter(config.payloadKeys) });
}

/** Identities of the workers polling `taskQueue` for workflow or activity tasks (seen in the last minutes). */
export async function pollerIdentities(
  connection: Connection,
  namespace: string,
  taskQueue: string,
  kind: 'workflow' | 'activity' = 'workflow',
): Promise<string[]> {
  type DescribeRequest = Parameters<Connection['workflowService']['describeTaskQueue']>[0];
  const taskQueueType = (kind === 'workflow' ? 1 : 2) as DescribeRequest['taskQueueType'];
  const res = await connection.withDeadline(Date.now() + 5000, () =>
    connection.workflowService.describeTaskQueue({ namespace, taskQueue: { name: taskQueue }, taskQueueType }),
  );
  return (res.pollers ?? []).map((p) => p.identity ?? '').filter(Boolean);
}

/** The server version if a Temporal frontend answers at `address` (with the configured TLS), else undefined. */
export async function temporalServerVersion(address: string, timeoutMs = 3000, config: TroupeConfig = loadConfig()): Promise<string | undefined> {
  let connection: Connection | undefined;
  try {
    connection = await Connection.connect({ ...temporalConnectionOptions(config, address), connectTimeout: timeoutMs });
    const info = await connection.withDeadline(Date.now() + timeoutMs, () => connection!.workflowService.getSystemInfo({}));
    return info.serverVersion || 'unknown';
  } catch {
    return undefined;
  } finally {
    await connection?.close().catch(() => undefined);
  }
}
