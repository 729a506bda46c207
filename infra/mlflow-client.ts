/**
 * The few calls of MLflow's tracking REST API (`/api/2.0/mlflow/...`) a run's export needs:
 * experiments by name, a run found by tag or created, batches of metrics and params, a
 * metric's history (what the server already holds), the run's status, and artifacts through
 * the server's proxy (`mlflow server` serves them by default). Every call has a timeout; an
 * error names the call and the server's answer.
 */

export interface MlflowMetric {
  key: string;
  value: number;
  /** Milliseconds since the epoch. */
  timestamp: number;
  step: number;
}

/** A tracking server (or `off`: none), as MLFLOW_TRACKING_URI and a run config's `mlflow` name it. */
export const TRACKING_URI = /^(https?:\/\/\S+|off)$/;
export const TRACKING_URI_RULE = 'must be an http(s) URL of an MLflow tracking server, or off';

export type MlflowRunStatus = 'RUNNING' | 'FINISHED' | 'FAILED' | 'KILLED';

/** MLflow's limits per log-batch request. */
const MAX_METRICS = 1000;
const MAX_PARAMS = 100;

export class MlflowClient {
  constructor(
    readonly trackingUri: string,
    private readonly timeoutMs = 10_000,
  ) {}

  private async call<T>(method: 'GET' | 'POST', endpoint: string, body?: Record<string, unknown>): Promise<T> {
    const url = new URL(`api/2.0/mlflow/${endpoint}`, this.trackingUri.endsWith('/') ? this.trackingUri : `${this.trackingUri}/`);
    if (method === 'GET' && body) for (const [k, v] of Object.entries(body)) url.searchParams.set(k, String(v));
    const res = await fetch(url, {
      method,
      headers: method === 'POST' ? { 'content-type': 'application/json' } : {},
      body: method === 'POST' ? JSON.stringify(body ?? {}) : undefined,
      signal: AbortSignal.timeout(this.timeoutMs),
    }).catch((e: unknown) => unreachable(`MLflow ${endpoint}`, url, e));
    const text = await res.text();
    if (!res.ok) throw new MlflowError(`MLflow ${endpoint}: HTTP ${res.status} ${text.slice(0, 300)}`, res.status, text);
    return (text ? JSON.parse(text) : {}) as T;
  }

  /** The experiment's id, created if it does not exist. */
  async experimentId(name: string): Promise<string> {
    try {
      const got = await this.call<{ experiment: { experiment_id: string } }>('GET', 'experiments/get-by-name', { experiment_name: name });
      return got.experiment.experiment_id;
    } catch (e) {
      if (!(e instanceof MlflowError) || !e.body.includes('RESOURCE_DOES_NOT_EXIST')) throw e;
    }
    try {
      return (await this.call<{ experiment_id: string }>('POST', 'experiments/create', { name })).experiment_id;
    } catch (e) {
      // created meanwhile by another exporter
      if (e instanceof MlflowError && e.body.includes('RESOURCE_ALREADY_EXISTS')) return this.experimentId(name);
      throw e;
    }
  }

  /** The id of the experiment's run tagged key=value, if one exists. */
  async runByTag(experimentId: string, key: string, value: string): Promise<string | undefined> {
    const got = await this.call<{ runs?: Array<{ info: { run_id: string } }> }>('POST', 'runs/search', {
      experiment_ids: [experimentId],
      filter: `tags.\`${key}\` = '${value.replace(/'/g, "\\'")}'`,
      max_results: 1,
    });
    return got.runs?.[0]?.info.run_id;
  }

  async createRun(experimentId: string, name: string, startTime: number, tags: Record<string, string>): Promise<string> {
    const got = await this.call<{ run: { info: { run_id: string } } }>('POST', 'runs/create', {
      experiment_id: experimentId,
      run_name: name,
      start_time: startTime,
      tags: Object.entries(tags).map(([key, value]) => ({ key, value })),
    });
    return got.run.info.run_id;
  }

  /** The run's status, artifact root and the keys of the metrics it has. */
  async run(runId: string): Promise<{ status: MlflowRunStatus; artifactUri: string; metricKeys: string[]; params: Record<string, string> }> {
    const got = await this.call<{
      run: {
        info: { status: MlflowRunStatus; artifact_uri: string };
        data: { metrics?: Array<{ key: string }>; params?: Array<{ key: string; value: string }> };
      };
    }>('GET', 'runs/get', { run_id: runId });
    return {
      status: got.run.info.status,
      artifactUri: got.run.info.artifact_uri,
      metricKeys: (got.run.data.metrics ?? []).map((m) => m.key),
      params: Object.fromEntries((got.run.data.params ?? []).map((p) => [p.key, p.value])),
    };
  }

  /** Every point of one metric of the run. */
  async history(runId: string, key: string): Promise<MlflowMetric[]> {
    const out: MlflowMetric[] = [];
    let token: string | undefined;
    do {
      const got = await this.call<{ metrics?: MlflowMetric[]; next_page_token?: string }>('GET', 'metrics/get-history', {
        run_id: runId,
        metric_key: key,
        max_results: 25000,
        ...(token ? { page_token: token } : {}),
      });
      out.push(...(got.metrics ?? []).map((m) => ({ ...m, step: Number(m.step ?? 0), timestamp: Number(m.timestamp) })));
      token = got.next_page_token || undefined;
    } while (token);
    return out;
  }

  async logBatch(runId: string, batch: { metrics?: MlflowMetric[]; params?: Record<string, string> }): Promise<void> {
    const metrics = batch.metrics ?? [];
    const params = Object.entries(batch.params ?? {}).map(([key, value]) => ({ key, value }));
    for (let i = 0; i < metrics.length; i += MAX_METRICS)
      await this.call('POST', 'runs/log-batch', { run_id: runId, metrics: metrics.slice(i, i + MAX_METRICS) });
    for (let i = 0; i < params.length; i += MAX_PARAMS) await this.call('POST', 'runs/log-batch', { run_id: runId, params: params.slice(i, i + MAX_PARAMS) });
  }

  async setStatus(runId: string, status: MlflowRunStatus, endTime?: number): Promise<void> {
    await this.call('POST', 'runs/update', { run_id: runId, status, ...(endTime !== undefined ? { end_time: endTime } : {}) });
  }

  /**
   * Uploads `data` as `<artifact root>/<path>` through the server's artifact proxy (`mlflow-artifacts:` roots).
   * Its timeout grows with its size (the call's own, plus a second per 10 MB), so a model's weights are not cut off.
   */
  async uploadArtifact(artifactUri: string, path: string, data: Buffer | string): Promise<void> {
    const root = /^mlflow-artifacts:(?:\/\/[^/]*)?(\/.*)$/.exec(artifactUri)?.[1];
    if (!root) throw new Error(`artifact root ${artifactUri} is not served by the tracking server (start it with --serve-artifacts)`);
    const base = this.trackingUri.endsWith('/') ? this.trackingUri : `${this.trackingUri}/`;
    const url = new URL(`api/2.0/mlflow-artifacts/artifacts${root}/${path}`, base);
    const ms = this.timeoutMs + Math.ceil(Buffer.byteLength(data) / 10e6) * 1000;
    const res = await fetch(url, { method: 'PUT', body: data, signal: AbortSignal.timeout(ms) }).catch((e: unknown) =>
      unreachable(`MLflow artifact ${path}`, url, e),
    );
    if (!res.ok) throw new MlflowError(`MLflow artifact ${path}: HTTP ${res.status} ${(await res.text()).slice(0, 300)}`, res.status, '');
  }
}

/** A request that got no answer: the call, the server and why (fetch's own message is only "fetch failed"). */
function unreachable(call: string, url: URL, e: unknown): never {
  const cause = e instanceof Error ? ((e.cause as Error | undefined)?.message ?? e.message) : String(e);
  throw new Error(`${call}: no answer from ${url.origin} (${cause})`);
}

export class MlflowError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly body: string,
  ) {
    super(message);
    this.name = 'MlflowError';
  }
}
