// PostgreSQL client (porsager `postgres`), configured once for all of Troupe.
//
//   import { connect } from './db';
//   const sql = connect(url);          // lazy: connects on first query
//   const [row] = await sql`select 1 as one`;
//   await sql.end();
//
// Choices:
// - `max` 5 connections per client by default (workers are many, Postgres connections are not).
// - notices are dropped (`onnotice`), e.g. "relation already exists, skipping".
// - bigint / int8 / bigserial / count(*) come back as JS `number`, not strings. A value
//   beyond Number.MAX_SAFE_INTEGER (2^53-1) throws rather than silently losing precision.
//   Use `numeric` or `::text` for values that may be larger. `numeric` stays a string.
// - timestamps come back as JS Date; jsonb as parsed JSON.
// - TLS as libpq does it: sslmode / sslrootcert / sslcert / sslkey in the URL's query, else
//   PGSSLMODE / PGSSLROOTCERT / PGSSLCERT / PGSSLKEY (postgresTls below).
import { checkServerIdentity, type ConnectionOptions as TlsOptions } from 'node:tls';
import postgres from 'postgres';
import { ConfigError, SSL_MODES, loadConfig, readConfigFile, redactUrl, type DatabaseTlsConfig, type SslMode } from './config';
import { TroupeError, errorMessage } from './errors';

const INT8_OID = 20;

const int8AsNumber = {
  to: INT8_OID,
  from: [INT8_OID],
  serialize: (x: number | bigint | string) => String(x),
  parse: (raw: string): number => {
    const n = Number(raw);
    if (!Number.isSafeInteger(n)) {
      throw new RangeError(`int8 value ${raw} does not fit a JS number exactly; select it as ::text or numeric`);
    }
    return n;
  },
};

/** A lone UTF-16 surrogate: half of a character outside the BMP (a reply cut with `slice`, say). */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * json / jsonb values, each string with its lone surrogates as U+FFFD: what Node's UTF-8 makes of
 * them in a text column. JSON.stringify writes one as `\ud800`, which PostgreSQL refuses in jsonb
 * (22P02): the write, and every retry of it, would fail on a model's half character.
 */
const wellFormedJson = {
  to: 114,
  from: [114, 3802],
  serialize: (x: unknown) => JSON.stringify(x, (_key, v: unknown) => (typeof v === 'string' ? v.replace(LONE_SURROGATE, '\ufffd') : v)),
  parse: (raw: string): unknown => JSON.parse(raw),
};

const types = { bigint: int8AsNumber, json: wellFormedJson };

/** A connected client (tagged template `sql\`...\``). */
export type Sql = postgres.Sql<{ bigint: number }>;

export interface ConnectOptions {
  /** Max pooled connections (default 5). */
  max?: number;
  /** Shown in pg_stat_activity (default "troupe"). */
  applicationName?: string;
  /** Seconds to wait for a connection (default 10). */
  connectTimeout?: number;
  /** TLS settings the URL does not give (default: PGSSLMODE... from the environment). */
  tls?: DatabaseTlsConfig;
}

const URL_TLS_PARAMS = ['sslmode', 'sslrootcert', 'sslcert', 'sslkey'] as const;

/**
 * The URL without its TLS parameters, and postgres.js's `ssl` option for them, with libpq's
 * meaning: disable; allow / prefer (TLS if the server offers it); require (encrypted, not
 * verified, unless a root certificate is given: then as verify-ca); verify-ca (the chain);
 * verify-full (the chain and the host name). sslcert + sslkey send a client certificate.
 */
export function postgresTls(url: string, env: DatabaseTlsConfig): { url: string; ssl?: boolean | 'prefer' | TlsOptions } {
  const u = new URL(url);
  const fromUrl = Object.fromEntries(URL_TLS_PARAMS.map((k) => [k, u.searchParams.get(k) ?? undefined]));
  for (const k of URL_TLS_PARAMS) u.searchParams.delete(k);
  const stripped = URL_TLS_PARAMS.some((k) => fromUrl[k] !== undefined) ? u.toString() : url;
  const pick = (k: (typeof URL_TLS_PARAMS)[number], variable: string) =>
    fromUrl[k] ? { value: fromUrl[k]!, from: `DATABASE_URL (${k}=)` } : env[k] ? { value: env[k]!, from: variable } : undefined;
  const mode = pick('sslmode', 'PGSSLMODE');
  const root = pick('sslrootcert', 'PGSSLROOTCERT');
  const cert = pick('sslcert', 'PGSSLCERT');
  const key = pick('sslkey', 'PGSSLKEY');
  if (mode && !(SSL_MODES as readonly string[]).includes(mode.value)) {
    throw new ConfigError(mode.from, `sslmode must be one of ${SSL_MODES.join(', ')} (got ${mode.value})`);
  }
  if (Boolean(cert) !== Boolean(key))
    throw new ConfigError(cert ? (key?.from ?? 'PGSSLKEY') : 'PGSSLCERT', 'the client certificate needs both sslcert and sslkey');
  if (!mode && !root && !cert) return { url: stripped };
  const read = (p: { value: string; from: string }) => readConfigFile(p.from, p.value);
  const sslmode = (mode?.value ?? 'prefer') as SslMode;
  const clientCert = cert && key ? { cert: read(cert), key: read(key) } : {};
  const verify = sslmode === 'verify-ca' || sslmode === 'verify-full' || (sslmode === 'require' && root);
  let ssl: boolean | 'prefer' | TlsOptions;
  if (sslmode === 'disable') ssl = false;
  else if (sslmode === 'allow' || sslmode === 'prefer') ssl = 'prefer';
  else if (!verify) ssl = { rejectUnauthorized: false, ...clientCert };
  else {
    ssl = { rejectUnauthorized: true, ...(root ? { ca: read(root) } : {}), ...clientCert };
    // verify-ca checks the chain only; verify-full also the URL's host. (postgres.js gives Node
    // no server name for an IP address, and Node then checks the certificate against "localhost".)
    const host = u.hostname.replace(/^\[|\]$/g, '');
    ssl.checkServerIdentity = sslmode === 'verify-full' ? (_name, cert) => checkServerIdentity(host, cert) : () => undefined;
  }
  return { url: stripped, ssl };
}

/** Create a client for `url`. Lazy: nothing connects until the first query. */
export function connect(url: string, opts: ConnectOptions = {}): Sql {
  const tls = postgresTls(url, opts.tls ?? loadConfig().databaseTls);
  return postgres(tls.url, {
    ...(tls.ssl !== undefined ? { ssl: tls.ssl } : {}),
    max: opts.max ?? 5,
    idle_timeout: 30,
    connect_timeout: opts.connectTimeout ?? 10,
    onnotice: () => undefined,
    types,
    connection: { application_name: opts.applicationName ?? 'troupe' },
  }) as unknown as Sql;
}

/** Turn a connection/query failure into one clear line plus what to do. */
export function describeDbError(err: unknown, url: string, what = 'PostgreSQL'): TroupeError {
  const e = err as { code?: string; message?: string; errno?: string };
  const where = redactUrl(url);
  let host = '';
  try {
    const u = new URL(url);
    host = `${u.hostname}:${u.port || 5432}`;
  } catch {
    /* keep empty */
  }
  const code = e?.code ?? '';
  if (code === 'ECONNREFUSED' || code === 'CONNECT_TIMEOUT' || code === 'ETIMEDOUT' || code === 'EHOSTUNREACH') {
    return new TroupeError(
      `cannot reach ${what} at ${host} (${code})`,
      'start that server or fix DATABASE_URL; unset DATABASE_URL to use the embedded PostgreSQL',
      { cause: err },
    );
  }
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') {
    return new TroupeError(`cannot resolve the host of ${where}`, 'fix the host name in DATABASE_URL', { cause: err });
  }
  if (code === '28P01' || code === '28000' || code === 'SASL_SIGNATURE_MISMATCH' || /password|authentication/i.test(e?.message ?? '')) {
    return new TroupeError(
      `${what} refused the login for ${where}: ${errorMessage(err)}`,
      'fix the user/password in DATABASE_URL (postgres://user:password@host:port/db)',
      { cause: err },
    );
  }
  if (/certificate|SSL|TLS|self.signed/i.test(e?.message ?? '') || /^ERR_TLS|CERT|^DEPTH_ZERO/.test(code)) {
    return new TroupeError(
      `${what} at ${where}: TLS: ${errorMessage(err)}`,
      'check sslmode / sslrootcert in DATABASE_URL or PGSSLMODE / PGSSLROOTCERT (verify-full needs a certificate for the host name you connect to)',
      {
        cause: err,
      },
    );
  }
  if (code === '3D000') {
    return new TroupeError(
      `database does not exist: ${errorMessage(err)} (${where})`,
      'create it (`createdb NAME`) or point DATABASE_URL at an existing database',
      { cause: err },
    );
  }
  return new TroupeError(`${what} at ${where}: ${errorMessage(err)}`, 'check DATABASE_URL and that the server is up', {
    cause: err,
  });
}

/** Connect once and read `server_version`; throws a TroupeError saying what went wrong. */
export async function checkDatabase(url: string, opts: { connectTimeout?: number; tls?: DatabaseTlsConfig } = {}): Promise<{ serverVersion: string }> {
  const sql = connect(url, { max: 1, connectTimeout: opts.connectTimeout ?? 5, tls: opts.tls });
  try {
    const [row] = await sql<{ server_version: string }[]>`show server_version`;
    return { serverVersion: row!.server_version };
  } catch (err) {
    throw describeDbError(err, url);
  } finally {
    await sql.end({ timeout: 1 }).catch(() => undefined);
  }
}

/** Same URL with another database name (for creating per-test databases). */
export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = '/' + encodeURIComponent(database);
  return u.toString();
}

/**
 * postgres.js 3.4.9 (the latest release) lets connection losses escape its promises: a
 * backend terminated during a connection's first query rejects a promise nobody holds (an
 * unhandled rejection), and a small write queued as the socket closes throws from a
 * setImmediate (`Cannot read properties of null (reading 'write')`, porsager/postgres#1154).
 * Either ends the process by Node's default, though the client reconnects on its next query
 * and the query in flight has already failed (retried by its activity). A PostgreSQL restart
 * causes both. Long-lived processes call this once: those two are logged and dropped; every
 * other uncaught error ends the process as Node's default does.
 */
export function dropPostgresJsStrays(log: (event: Record<string, unknown>) => void): void {
  if (strayGuardInstalled) return;
  strayGuardInstalled = true;
  process.on('unhandledRejection', (reason) => {
    if (!isPostgresJsStray(reason)) throw reason;
    log({ event: 'postgres-js-stray-error', kind: 'unhandled rejection', error: errorMessage(reason) });
  });
  process.on('uncaughtException', (err) => {
    if (isPostgresJsStray(err)) {
      log({ event: 'postgres-js-stray-error', kind: 'uncaught exception', error: errorMessage(err) });
      return;
    }
    process.stderr.write(`${err?.stack ?? String(err)}\n`);
    process.exit(1);
  });
}

let strayGuardInstalled = false;

/** An error thrown by postgres.js's connection code for a connection that is gone. */
export function isPostgresJsStray(e: unknown): boolean {
  const err = e as { name?: string; message?: string; stack?: string; severity?: string; code?: string; syscall?: string } | null;
  if (!err || typeof err !== 'object') return false;
  // A socket error with no listener left: postgres.js removes its listeners when a connection closes.
  const bareSocket = (err.stack ?? '')
    .split('\n')
    .slice(1)
    .every((l) => !l.trim() || /\(node:/.test(l) || /at node:/.test(l));
  if (['ECONNRESET', 'EPIPE'].includes(err.code ?? '') && (err.syscall === 'read' || err.syscall === 'write') && bareSocket) return true;
  if (!/[\\/]postgres[\\/](cjs|src|esm)[\\/].*connection\.js/.test(err.stack ?? '')) return false;
  if (err instanceof TypeError) return /reading 'write'/.test(err.message ?? '');
  // A backend that was terminated (57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now) or a lost socket.
  return (
    (err.name === 'PostgresError' && (err.severity === 'FATAL' || err.severity === 'PANIC')) ||
    ['CONNECTION_CLOSED', 'CONNECTION_ENDED', 'CONNECTION_DESTROYED', 'ECONNRESET', 'EPIPE'].includes(err.code ?? '')
  );
}
