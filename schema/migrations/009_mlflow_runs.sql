-- MLflow exports (issue #46; activities/store/mlflow.ts): the tracking server each Troupe run
-- exports to (written before the server is first called), the MLflow run it became, and whether
-- the run's end reached MLflow (a control worker that starts catches up the unfinished ones), and
-- how many export passes completed (an exporter whose count differs re-reads the server). The
-- points themselves are never tracked here: the server is the cursor.
CREATE TABLE mlflow_runs (
  run_id         text PRIMARY KEY REFERENCES runs (run_id),
  tracking_uri   text NOT NULL,
  experiment_id  text,
  mlflow_run_id  text,
  finished       boolean NOT NULL DEFAULT false,
  passes         bigint NOT NULL DEFAULT 0
);
