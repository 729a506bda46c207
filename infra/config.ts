// Environment configuration of the stack, parsed with zod by loadConfig(). Every error names the variable.
//
//   import { loadConfig } from './config';
//   const config = loadConfig();            // throws ConfigError (a TroupeError) on bad input
//
// Not every variable comes through here. A few are read where they are used, each as a
// fallback for an explicit option or flag, by code that also runs without the stack's config
// (a pool worker or engine process spawned on its own, a test): TROUPE_ENGINE, TROUPE_DEVICE,
// TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE and DATABASE_URL (processes/pool-worker.ts),
// TROUPE_ENGINE_MEMORY_BYTES / TROUPE_ENGINE_RSS_LIMIT_BYTES / TROUPE_ENGINE_METRICS_PORT (processes/onnx-engine.ts),
// TROUPE_PYTHON / TROUPE_PYTHON_BASE (stack/python-environment.ts), TROUPE_ENGINE_FAULTS (fault injection for the
// chaos tests, engines/onnx/engine.ts) and TROUPE_DEBUG (cli/main.ts).
// The table in docs/operations.md ("Configuration") lists the same variables; keep them in step.
import * as fs from 'node:fs';
import { isIP } from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { z } from 'zod';
import { DEFAULT_POOL } from './pools';
import { TroupeError, errorMessage } from './errors';
import { repoRoot } from './paths';
import { TRACKING_URI, TRACKING_URI_RULE } from './mlflow-client';

/** A configuration problem: `variable` is the environment variable at fault. */
export class ConfigError extends TroupeError {
  readonly variable: string;
  constructor(variable: string, message: string, hint?: string) {
    super(`${variable}: ${message}`, hint);
    this.variable = variable;
  }
}

// Empty strings count as unset (`FOO= npx troupe up`).
const unsetIfEmpty = (v: unknown) => (typeof v === 'string' && v.trim() === '' ? undefined : v);
const optionalString = z.preprocess(unsetIfEmpty, z.string().trim().optional());
const stringWithDefault = (d: string) => z.preprocess(unsetIfEmpty, z.string().trim().default(d));

/** A port number from the environment; `port(d)` defaults to d, `optionalPort` may be unset. */
const portNumber = z
  .string()
  .trim()
  .regex(/^\d+$/, 'must be a port number (1-65535)')
  .transform(Number)
  .refine((n) => n >= 1 && n <= 65535, 'must be a port number (1-65535)');
const port = (d: number) => z.preprocess(unsetIfEmpty, portNumber.default(d));
const optionalPort = z.preprocess(unsetIfEmpty, portNumber.optional());

const hostPort = z.preprocess(
  unsetIfEmpty,
  z
    .string()
    .trim()
    .regex(/^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):\d{1,5}$/, 'must be host:port, e.g. 127.0.0.1:7233 or temporal.example.com:7233')
    .optional(),
);

// A host name or an IP address (IPv6 without brackets), to bind or to put in a URL.
const hostName = z
  .string()
  .trim()
  .refine(
    (v) => isIP(v) !== 0 || /^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$/.test(v),
    'must be a host name or an IP address (IPv6 without brackets), e.g. 0.0.0.0 or gw.example.com',
  );
const optionalHost = z.preprocess(unsetIfEmpty, hostName.optional());
const hostWithDefault = (d: string) => z.preprocess(unsetIfEmpty, hostName.default(d));

const postgresUrl = z.preprocess(
  unsetIfEmpty,
  z
    .string()
    .trim()
    .superRefine((value, ctx) => {
      let url: URL;
      try {
        url = new URL(value);
      } catch {
        ctx.addIssue({ code: 'custom', message: 'is not a valid URL' });
        return;
      }
      if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
        ctx.addIssue({ code: 'custom', message: `must start with postgres:// (got ${url.protocol}//)` });
      } else if (!url.hostname && !url.searchParams.get('host')) {
        ctx.addIssue({ code: 'custom', message: 'has no host' });
      }
    })
    .optional(),
);

const seconds = (d: number) =>
  z.preprocess(
    unsetIfEmpty,
    z
      .string()
      .trim()
      .regex(/^\d+(\.\d+)?$/, 'must be a number of seconds, e.g. 20')
      .transform(Number)
      .refine((n) => n > 0, 'must be > 0')
      .default(d),
  );

// Episode retention (activities/store/episode-retention.ts applies the same rules, naming its own fields):
// a decimal number (`whole`: digits only) that `ok` accepts, else `rule`.
const retentionNumber = (rule: string, ok: (n: number) => boolean, whole = false) =>
  z
    .string()
    .trim()
    .regex(whole ? /^\d+$/ : /^\d+(\.\d+)?$/, rule)
    .transform(Number)
    .refine(ok, rule);
const retentionDays = z.preprocess(unsetIfEmpty, retentionNumber('must be a number of days > 0, e.g. 7', (n) => n > 0).optional());
const retentionSteps = z.preprocess(unsetIfEmpty, retentionNumber('must be a whole number of steps >= 1, e.g. 10', (n) => n >= 1, true).optional());
const retentionSample = z.preprocess(unsetIfEmpty, retentionNumber('must be a fraction from 0 to 1, e.g. 0.05', (n) => n <= 1).optional());
const retentionInterval = z.preprocess(unsetIfEmpty, retentionNumber('must be a number of minutes > 0, e.g. 10', (n) => n > 0).default(10));

const byteCount = (d: number) =>
  z.preprocess(unsetIfEmpty, z.string().trim().regex(/^\d+$/, 'must be a whole number of bytes (0 = every version to files)').transform(Number).default(d));

const device = z.preprocess(
  unsetIfEmpty,
  z
    .string()
    .trim()
    // a list: the PyTorch engine's FSDP2 updates across the devices (engines/pytorch/parallel.py)
    .regex(
      /^(auto|cpu|cuda|cuda:\d+|cpu(,cpu)+|cuda:\d+(,cuda:\d+)+)$/,
      'must be auto, cpu, cuda, cuda:N, or a list for --engine pytorch (cpu,cpu or cuda:0,cuda:1)',
    )
    .default('auto'),
);

const bool = z.preprocess(
  unsetIfEmpty,
  z
    .string()
    .trim()
    .toLowerCase()
    .refine((v) => ['true', 'false', '1', '0'].includes(v), 'must be true or false')
    .transform((v) => v === 'true' || v === '1')
    .optional(),
);

/** libpq's sslmode values (PGSSLMODE, or ?sslmode= in DATABASE_URL). */
export const SSL_MODES = ['disable', 'allow', 'prefer', 'require', 'verify-ca', 'verify-full'] as const;
export type SslMode = (typeof SSL_MODES)[number];
const sslMode = z.preprocess(unsetIfEmpty, z.enum(SSL_MODES, { message: `must be one of ${SSL_MODES.join(', ')}` }).optional());

// A base64 AES-256 key: exactly 32 bytes once decoded.
const aesKey = z.preprocess(
  unsetIfEmpty,
  z
    .string()
    .trim()
    .refine((v) => /^[A-Za-z0-9+/]+={0,2}$/.test(v) && Buffer.from(v, 'base64').length === 32, 'must be 32 bytes in base64 (e.g. `openssl rand -base64 32`)')
    .optional(),
);

// Older keys that still decrypt: "id=base64key,id2=base64key2".
const keyList = z.preprocess(
  unsetIfEmpty,
  z
    .string()
    .trim()
    .transform((v, ctx) => {
      const keys: Record<string, Uint8Array> = {};
      for (const item of v.split(',')) {
        const at = item.indexOf('=');
        const id = item.slice(0, at).trim();
        const key = new Uint8Array(Buffer.from(item.slice(at + 1).trim(), 'base64'));
        if (at < 0 || !id) ctx.addIssue({ code: 'custom', message: `"${item}" is not id=base64key` });
        else if (key.length !== 32) ctx.addIssue({ code: 'custom', message: `key ${id} is not 32 bytes in base64` });
        else keys[id] = key;
      }
      return keys;
    })
    .optional(),
);

const schema = z.object({
  TEMPORAL_ADDRESS: hostPort,
  TEMPORAL_TLS: bool,
  TEMPORAL_TLS_SERVER_CA_CERT_PATH: optionalString,
  TEMPORAL_TLS_CLIENT_CERT_PATH: optionalString,
  TEMPORAL_TLS_CLIENT_KEY_PATH: optionalString,
  TEMPORAL_TLS_SERVER_NAME: optionalString,
  TEMPORAL_API_KEY: optionalString,
  TROUPE_PAYLOAD_KEY: aesKey,
  TROUPE_PAYLOAD_KEY_ID: stringWithDefault('default'),
  TROUPE_PAYLOAD_OLD_KEYS: keyList,
  PGSSLMODE: sslMode,
  PGSSLROOTCERT: optionalString,
  PGSSLCERT: optionalString,
  PGSSLKEY: optionalString,
  TEMPORAL_NAMESPACE: stringWithDefault('default'),
  TROUPE_TEMPORAL_BIN: optionalString,
  DATABASE_URL: postgresUrl,
  TROUPE_STATE_DIR: optionalString,
  TROUPE_CHECKPOINT_DIR: optionalString,
  TROUPE_TENSORBOARD_DIR: optionalString,
  MLFLOW_TRACKING_URI: z.preprocess(unsetIfEmpty, z.string().trim().regex(TRACKING_URI, TRACKING_URI_RULE).optional()),
  TROUPE_RETENTION_EPISODE_DAYS: retentionDays,
  TROUPE_RETENTION_EPISODE_STEPS: retentionSteps,
  TROUPE_RETENTION_EPISODE_SAMPLE: retentionSample,
  TROUPE_RETENTION_INTERVAL_MINUTES: retentionInterval,
  TROUPE_METRICS_HOST: stringWithDefault('127.0.0.1'),
  TROUPE_CONTROL_METRICS_PORT: optionalPort,
  TROUPE_POOL_METRICS_PORT: optionalPort,
  TROUPE_CHECKPOINT_INLINE_MAX_BYTES: byteCount(1 << 20),
  TROUPE_TASK_QUEUE: stringWithDefault('troupe'),
  TROUPE_POOL_TASK_QUEUE: stringWithDefault(DEFAULT_POOL),
  TROUPE_DEVICE: device,
  TROUPE_ENGINE_HANG_S: seconds(20),
  TROUPE_BLOCKED_LOOP_S: seconds(60),
  TROUPE_TEMPORAL_PORT: port(7233),
  TROUPE_TEMPORAL_UI_PORT: port(8233),
  TROUPE_POSTGRES_PORT: port(54329),
  TROUPE_DASHBOARD_PORT: port(8234),
  TROUPE_DASHBOARD_HOST: stringWithDefault('127.0.0.1'),
  TROUPE_DASHBOARD_TOKEN: optionalString,
  TROUPE_GATEWAY_HOST: hostWithDefault('127.0.0.1'),
  TROUPE_GATEWAY_PUBLIC_HOST: optionalHost,
  TROUPE_GATEWAY_TLS_CERT_PATH: optionalString,
  TROUPE_GATEWAY_TLS_KEY_PATH: optionalString,
});

/** Every variable loadConfig reads (deploy/ files are checked against it). */
export const CONFIG_VARIABLES: readonly string[] = Object.keys(schema.shape);

/** How clients and workers secure their Temporal connection (the Temporal CLI's variable names). */
export interface TemporalTlsConfig {
  /** TLS on: TEMPORAL_TLS, or implied by any of the other settings. */
  enabled: boolean;
  /** PEM file of the CA that signed the server's certificate (TEMPORAL_TLS_SERVER_CA_CERT_PATH); unset: the system's CAs. */
  caPath?: string;
  /** Client certificate and key for mTLS (TEMPORAL_TLS_CLIENT_CERT_PATH, TEMPORAL_TLS_CLIENT_KEY_PATH): both or neither. */
  certPath?: string;
  keyPath?: string;
  /** Name to verify the server's certificate against instead of the address's host (TEMPORAL_TLS_SERVER_NAME). */
  serverName?: string;
  /** Temporal Cloud API key, sent as a bearer token (TEMPORAL_API_KEY); implies TLS. */
  apiKey?: string;
}

/** PostgreSQL TLS settings from libpq's variables; ?sslmode=&sslrootcert=... in the URL win over them. */
export interface DatabaseTlsConfig {
  sslmode?: SslMode;
  sslrootcert?: string;
  sslcert?: string;
  sslkey?: string;
}

/** The payload codec's keys: encrypt with `keyId`; decrypt with it or any old key. */
export interface PayloadKeysConfig {
  keyId: string;
  key: Uint8Array;
  oldKeys: Record<string, Uint8Array>;
}

/** Where each episode thread's gateway listens and the address its sessions' baseURLs carry (on an ephemeral port). */
export interface GatewayConfig {
  /** Address the gateway binds to (TROUPE_GATEWAY_HOST): loopback unless set; anything else needs TLS. */
  host: string;
  /** Host in each session's baseURL (TROUPE_GATEWAY_PUBLIC_HOST; default the bind address, or this machine's host name for 0.0.0.0 / ::). */
  publicHost: string;
  /** PEM certificate (chain) and key the gateway serves HTTPS with (TROUPE_GATEWAY_TLS_CERT_PATH, TROUPE_GATEWAY_TLS_KEY_PATH): both or neither. */
  tls?: { certPath: string; keyPath: string };
}

export interface TroupeConfig {
  /** Attach to this Temporal server instead of starting the dev server (TEMPORAL_ADDRESS). */
  temporalAddress?: string;
  temporalTls: TemporalTlsConfig;
  /** Encrypt payloads (AES-256-GCM) when set (TROUPE_PAYLOAD_KEY, TROUPE_PAYLOAD_KEY_ID, TROUPE_PAYLOAD_OLD_KEYS). */
  payloadKeys?: PayloadKeysConfig;
  databaseTls: DatabaseTlsConfig;
  /** Temporal namespace (TEMPORAL_NAMESPACE). */
  namespace: string;
  /** Explicit path of the `temporal` CLI binary (TROUPE_TEMPORAL_BIN). */
  temporalBin?: string;
  /** External PostgreSQL; unset means the embedded one (DATABASE_URL). */
  databaseUrl?: string;
  /** Absolute folder for pid files, logs, the dev server's SQLite file, the embedded Postgres (TROUPE_STATE_DIR). */
  stateDir: string;
  /** Folder of the checkpoint store's files (TROUPE_CHECKPOINT_DIR; default <stateDir>/checkpoints). Every pool worker and engine of a cluster must see it at the same path. */
  checkpointDir: string;
  /** Folder of the runs' TensorBoard event files, one folder per run (TROUPE_TENSORBOARD_DIR; default <stateDir>/runs/<run>/tensorboard; `off`: none). */
  tensorboardDir?: string;
  /** MLflow tracking server of runs whose config names none (MLFLOW_TRACKING_URI: an http(s) URL; `off` or unset: none). */
  mlflowTrackingUri?: string;
  /**
   * Episode retention the control worker enforces in the background, every `intervalMinutes`
   * (TROUPE_RETENTION_EPISODE_DAYS, _STEPS, _SAMPLE: see activities/store/episode-retention.ts;
   * TROUPE_RETENTION_INTERVAL_MINUTES, default 10); unset when none of the three is set: nothing pruned.
   */
  episodeRetention?: { keepDays?: number; keepSteps?: number; sample: number; intervalMinutes: number };
  /** Prometheus `/metrics` of the control worker and of a pool worker (TROUPE_METRICS_HOST, default loopback; TROUPE_CONTROL_METRICS_PORT, TROUPE_POOL_METRICS_PORT: unset, none). */
  metrics: { host: string; controlPort?: number; poolPort?: number };
  /** Versions up to this many bytes (weights + optimizer state) stay inline in Postgres (TROUPE_CHECKPOINT_INLINE_MAX_BYTES). */
  checkpointInlineMaxBytes: number;
  /** Control task queue: workflows and control activities (TROUPE_TASK_QUEUE). */
  taskQueue: string;
  /** Task queue that serves the default pool (TROUPE_POOL_TASK_QUEUE): `up`'s pool worker polls it, runs send its models' work there. */
  poolTaskQueue: string;
  /** Device for the pool worker's engine: auto | cpu | cuda | cuda:N, or a list for the PyTorch engine's FSDP2 updates (TROUPE_DEVICE). */
  device: string;
  /** A spawned engine without progress for this long is killed and restarted (TROUPE_ENGINE_HANG_S). */
  engineHangS: number;
  /** A worker whose event loop has not run for this long kills itself, to be restarted (TROUPE_BLOCKED_LOOP_S). */
  blockedLoopS: number;
  /** gRPC port of the dev server `up` starts (TROUPE_TEMPORAL_PORT). */
  temporalPort: number;
  /** Web UI port of the dev server (TROUPE_TEMPORAL_UI_PORT). */
  temporalUiPort: number;
  /** Port of the embedded PostgreSQL (TROUPE_POSTGRES_PORT). */
  postgresPort: number;
  /** Port and address of the dashboard `up` starts (TROUPE_DASHBOARD_PORT, TROUPE_DASHBOARD_HOST: loopback unless set). */
  dashboardPort: number;
  dashboardHost: string;
  /** Enables the dashboard's run controls for requests that carry it (TROUPE_DASHBOARD_TOKEN); unset: controls refused. */
  dashboardToken?: string;
  gateway: GatewayConfig;
}

const hints: Record<string, string> = {
  TEMPORAL_ADDRESS: 'set it to host:port of a running Temporal frontend, or unset it to let Troupe start a local dev server',
  DATABASE_URL: 'set it like postgres://user:password@host:5432/dbname, or unset it to use the embedded PostgreSQL under TROUPE_STATE_DIR',
  TROUPE_DEVICE: 'use auto (CUDA if available, else CPU), cpu, cuda or cuda:0',
  TEMPORAL_TLS: 'set true to use TLS with the system CAs, or unset it',
  TROUPE_PAYLOAD_KEY: 'generate one with `openssl rand -base64 32`; every client and worker needs the same key',
  TROUPE_PAYLOAD_OLD_KEYS: 'list retired keys as id=base64key, separated by commas',
};

/** Parse Troupe's configuration from an environment (default: process.env). Throws ConfigError. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): TroupeConfig {
  const e = parseEnv(schema, env);
  certificatePair(e, 'TEMPORAL_TLS_CLIENT_CERT_PATH', 'TEMPORAL_TLS_CLIENT_KEY_PATH', 'the client certificate pair', 'mTLS');
  if (e.TROUPE_PAYLOAD_OLD_KEYS && !e.TROUPE_PAYLOAD_KEY) {
    throw new ConfigError('TROUPE_PAYLOAD_KEY', 'is required when TROUPE_PAYLOAD_OLD_KEYS is set', 'set the current key; old keys only decrypt');
  }
  const gateway = gatewayOf(e);
  const tlsImplied = Boolean(e.TEMPORAL_TLS_SERVER_CA_CERT_PATH || e.TEMPORAL_TLS_CLIENT_CERT_PATH || e.TEMPORAL_TLS_SERVER_NAME || e.TEMPORAL_API_KEY);
  const stateDir = path.resolve(e.TROUPE_STATE_DIR ?? path.join(repoRoot, '.troupe'));
  return {
    temporalAddress: e.TEMPORAL_ADDRESS,
    temporalTls: {
      enabled: e.TEMPORAL_TLS ?? tlsImplied,
      caPath: e.TEMPORAL_TLS_SERVER_CA_CERT_PATH,
      certPath: e.TEMPORAL_TLS_CLIENT_CERT_PATH,
      keyPath: e.TEMPORAL_TLS_CLIENT_KEY_PATH,
      serverName: e.TEMPORAL_TLS_SERVER_NAME,
      apiKey: e.TEMPORAL_API_KEY,
    },
    payloadKeys: e.TROUPE_PAYLOAD_KEY
      ? {
          keyId: e.TROUPE_PAYLOAD_KEY_ID,
          key: new Uint8Array(Buffer.from(e.TROUPE_PAYLOAD_KEY, 'base64')),
          oldKeys: e.TROUPE_PAYLOAD_OLD_KEYS ?? {},
        }
      : undefined,
    databaseTls: { sslmode: e.PGSSLMODE, sslrootcert: e.PGSSLROOTCERT, sslcert: e.PGSSLCERT, sslkey: e.PGSSLKEY },
    namespace: e.TEMPORAL_NAMESPACE,
    temporalBin: e.TROUPE_TEMPORAL_BIN,
    databaseUrl: e.DATABASE_URL,
    stateDir,
    checkpointDir: path.resolve(e.TROUPE_CHECKPOINT_DIR ?? path.join(stateDir, 'checkpoints')),
    tensorboardDir:
      e.TROUPE_TENSORBOARD_DIR === undefined || e.TROUPE_TENSORBOARD_DIR === 'off' ? e.TROUPE_TENSORBOARD_DIR : path.resolve(e.TROUPE_TENSORBOARD_DIR),
    mlflowTrackingUri: e.MLFLOW_TRACKING_URI,
    episodeRetention:
      e.TROUPE_RETENTION_EPISODE_DAYS === undefined && e.TROUPE_RETENTION_EPISODE_STEPS === undefined && e.TROUPE_RETENTION_EPISODE_SAMPLE === undefined
        ? undefined
        : {
            keepDays: e.TROUPE_RETENTION_EPISODE_DAYS,
            keepSteps: e.TROUPE_RETENTION_EPISODE_STEPS,
            sample: e.TROUPE_RETENTION_EPISODE_SAMPLE ?? 0,
            intervalMinutes: e.TROUPE_RETENTION_INTERVAL_MINUTES,
          },
    metrics: { host: e.TROUPE_METRICS_HOST, controlPort: e.TROUPE_CONTROL_METRICS_PORT, poolPort: e.TROUPE_POOL_METRICS_PORT },
    checkpointInlineMaxBytes: e.TROUPE_CHECKPOINT_INLINE_MAX_BYTES,
    taskQueue: e.TROUPE_TASK_QUEUE,
    poolTaskQueue: e.TROUPE_POOL_TASK_QUEUE,
    device: e.TROUPE_DEVICE,
    engineHangS: e.TROUPE_ENGINE_HANG_S,
    blockedLoopS: e.TROUPE_BLOCKED_LOOP_S,
    temporalPort: e.TROUPE_TEMPORAL_PORT,
    temporalUiPort: e.TROUPE_TEMPORAL_UI_PORT,
    postgresPort: e.TROUPE_POSTGRES_PORT,
    dashboardPort: e.TROUPE_DASHBOARD_PORT,
    dashboardHost: e.TROUPE_DASHBOARD_HOST,
    dashboardToken: e.TROUPE_DASHBOARD_TOKEN,
    gateway,
  };
}

/** The environment parsed by `shape`; the first bad variable → ConfigError naming it. */
function parseEnv<T extends z.ZodRawShape>(shape: z.ZodObject<T>, env: NodeJS.ProcessEnv): z.infer<z.ZodObject<T>> {
  const result = shape.safeParse(env);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const variable = String(issue.path[0] ?? 'environment');
  const others = result.error.issues.length - 1;
  const hint = [hints[variable], others > 0 ? `${others} more problem(s) after this one` : undefined].filter(Boolean).join('; ');
  throw new ConfigError(variable, issue.message, hint || `fix or unset ${variable}`);
}

const gatewaySchema = schema.pick({
  TROUPE_GATEWAY_HOST: true,
  TROUPE_GATEWAY_PUBLIC_HOST: true,
  TROUPE_GATEWAY_TLS_CERT_PATH: true,
  TROUPE_GATEWAY_TLS_KEY_PATH: true,
});

/** The gateway's variables (TROUPE_GATEWAY_*): `troupe doctor` checks them on a line of their own. */
export const GATEWAY_VARIABLES: readonly string[] = Object.keys(gatewaySchema.shape);

/** Only the gateway's part of loadConfig (the same rules): for a check that reports it apart from the rest. Throws ConfigError. */
export function loadGatewayConfig(env: NodeJS.ProcessEnv = process.env): GatewayConfig {
  return gatewayOf(parseEnv(gatewaySchema, env));
}

function gatewayOf(e: z.infer<typeof gatewaySchema>): GatewayConfig {
  certificatePair(e, 'TROUPE_GATEWAY_TLS_CERT_PATH', 'TROUPE_GATEWAY_TLS_KEY_PATH', "the gateway's certificate pair", 'HTTPS');
  if (!e.TROUPE_GATEWAY_TLS_CERT_PATH && !isLoopback(e.TROUPE_GATEWAY_HOST)) {
    throw new ConfigError(
      'TROUPE_GATEWAY_TLS_CERT_PATH',
      `is required to bind the gateway to ${e.TROUPE_GATEWAY_HOST} (TROUPE_GATEWAY_HOST): its sessions' keys must not cross the network in clear`,
      'set TROUPE_GATEWAY_TLS_CERT_PATH and TROUPE_GATEWAY_TLS_KEY_PATH (PEM), or bind the gateway to loopback',
    );
  }
  return {
    host: e.TROUPE_GATEWAY_HOST,
    publicHost: e.TROUPE_GATEWAY_PUBLIC_HOST ?? (isWildcard(e.TROUPE_GATEWAY_HOST) ? os.hostname() : e.TROUPE_GATEWAY_HOST),
    tls:
      e.TROUPE_GATEWAY_TLS_CERT_PATH && e.TROUPE_GATEWAY_TLS_KEY_PATH
        ? { certPath: e.TROUPE_GATEWAY_TLS_CERT_PATH, keyPath: e.TROUPE_GATEWAY_TLS_KEY_PATH }
        : undefined,
  };
}

/** A certificate and its key come both or neither: the missing one is named. */
function certificatePair(e: Partial<Record<string, unknown>>, cert: string, key: string, what: string, use: string): void {
  if (Boolean(e[cert]) === Boolean(e[key])) return;
  throw new ConfigError(e[cert] ? key : cert, `is required with the other half of ${what}`, `set both ${cert} and ${key} (${use}), or neither`);
}

/** An address that only this machine reaches: localhost, 127.0.0.0/8, ::1. */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || (isIP(host) === 4 && host.startsWith('127.'));
}

/** Every interface: 0.0.0.0 or ::. */
export const isWildcard = (host: string) => host === '0.0.0.0' || host === '::';

/** A host as it stands in a URL (an IPv6 address in brackets). */
export const urlHost = (host: string) => (host.includes(':') ? `[${host}]` : host);

/** A file a variable names (a PEM certificate or key), read now; unreadable → ConfigError naming the variable. */
export function readConfigFile(variable: string, file: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (err) {
    throw new ConfigError(variable, `cannot read ${file}: ${errorMessage(err)}`, 'point it at a readable PEM file');
  }
}

/** The address clients use: TEMPORAL_ADDRESS, else the local dev server's port. */
export function temporalAddressOf(config: TroupeConfig): string {
  return config.temporalAddress ?? `127.0.0.1:${config.temporalPort}`;
}

/** A postgres URL with its password replaced by `***`, for printing. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparseable URL)';
  }
}
