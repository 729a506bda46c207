-- Training runs, their model versions, steps and graph trajectories.
-- Workflows carry ids; everything they refer to lives here.

CREATE TABLE runs (
  run_id        text PRIMARY KEY,
  team          text NOT NULL,
  config        jsonb NOT NULL,
  status        text NOT NULL DEFAULT 'running',
  -- The run this one resumed (lineage); NULL for a fresh run.
  resumed_from  text REFERENCES runs (run_id),
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now()
);

-- Every execution (workflow run) that worked on a run, in order.
CREATE TABLE run_executions (
  run_id        text NOT NULL REFERENCES runs (run_id),
  workflow_id   text NOT NULL,
  execution_id  text NOT NULL,
  start_step    integer NOT NULL,
  started_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, execution_id)
);

-- Immutable checkpoints. Version v+1 of a model is made by exactly one step.
CREATE TABLE versions (
  run_id           text NOT NULL REFERENCES runs (run_id),
  model            text NOT NULL,
  version          integer NOT NULL CHECK (version >= 0),
  -- The step whose update produced it (-1 for the initial version 0).
  step             integer NOT NULL,
  spec             jsonb NOT NULL,
  weights          bytea NOT NULL,
  optimizer_state  bytea NOT NULL,
  sha256           text NOT NULL,
  metrics          jsonb NOT NULL DEFAULT '{}',
  created_at       timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, model, version),
  UNIQUE (run_id, model, step)
);

CREATE TABLE steps (
  run_id       text NOT NULL REFERENCES runs (run_id),
  step         integer NOT NULL,
  status       text NOT NULL,
  metrics      jsonb NOT NULL DEFAULT '{}',
  -- Optimizer settings in force for this step (after any change by signal).
  settings     jsonb NOT NULL DEFAULT '{}',
  started_at   timestamptz,
  finished_at  timestamptz,
  PRIMARY KEY (run_id, step)
);

-- Per-agent (or per-model) metrics of a step or an eval, one row per value.
CREATE TABLE metrics (
  run_id  text NOT NULL REFERENCES runs (run_id),
  step    integer NOT NULL,
  kind    text NOT NULL,        -- 'train' | 'eval' | 'update'
  scope   text NOT NULL,        -- agent role, model name, or 'team'
  name    text NOT NULL,
  value   double precision NOT NULL,
  PRIMARY KEY (run_id, step, kind, scope, name)
);

-- Things that happened to a run: settings changed, pause, resume, non-finite updates.
CREATE TABLE run_events (
  id        bigserial PRIMARY KEY,
  run_id    text NOT NULL REFERENCES runs (run_id),
  step      integer NOT NULL,
  kind      text NOT NULL,
  detail    jsonb NOT NULL DEFAULT '{}',
  at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX run_events_run ON run_events (run_id, id);

CREATE TABLE episodes (
  episode_id   text PRIMARY KEY,
  run_id       text NOT NULL,
  step         integer NOT NULL,
  split        text NOT NULL CHECK (split IN ('train', 'eval')),
  task_id      text NOT NULL,
  task         jsonb NOT NULL,
  group_index  integer NOT NULL,
  episode_index integer NOT NULL,
  seed         bigint NOT NULL,
  mode         text NOT NULL CHECK (mode IN ('durable', 'batched')),
  status       text NOT NULL CHECK (status IN ('completed', 'truncated', 'failed')),
  outcome      jsonb,
  error        text,
  success      boolean,
  created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX episodes_run_step ON episodes (run_id, step, split);

CREATE TABLE turns (
  episode_id      text NOT NULL REFERENCES episodes (episode_id) ON DELETE CASCADE,
  turn_index      integer NOT NULL,
  agent           text NOT NULL,
  model           text NOT NULL,
  version         integer NOT NULL,
  parents         integer[] NOT NULL,
  context_tokens  integer[] NOT NULL,
  response_tokens integer[] NOT NULL,
  -- float8 so log-probs read back bit-identical to what the engine returned.
  logprobs        double precision[] NOT NULL,
  loss_mask       smallint[] NOT NULL,
  stop_reason     text NOT NULL,
  duration_ms     double precision NOT NULL,
  PRIMARY KEY (episode_id, turn_index)
);

CREATE TABLE tool_calls (
  episode_id   text NOT NULL REFERENCES episodes (episode_id) ON DELETE CASCADE,
  turn_index   integer NOT NULL,
  call_index   integer NOT NULL,
  tool         text NOT NULL,
  input        jsonb,
  output       jsonb,
  error        text,
  duration_ms  double precision NOT NULL,
  PRIMARY KEY (episode_id, turn_index, call_index)
);

CREATE TABLE rewards (
  episode_id  text NOT NULL REFERENCES episodes (episode_id) ON DELETE CASCADE,
  turn_index  integer NOT NULL,
  agent       text NOT NULL,
  component   text NOT NULL,
  value       double precision NOT NULL,
  PRIMARY KEY (episode_id, turn_index, component)
);
