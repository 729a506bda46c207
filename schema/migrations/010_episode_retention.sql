-- Episode retention (issue #49; activities/store/episode-retention.ts): per run, what pruning
-- deleted so far (training episodes, their turns, their journaled gateway calls) and the policy
-- of the last pass. Each pruned batch adds to its run's row in the transaction that deletes it.
CREATE TABLE episode_retention (
  run_id          text PRIMARY KEY REFERENCES runs (run_id),
  train_episodes  bigint NOT NULL DEFAULT 0,
  turns           bigint NOT NULL DEFAULT 0,
  gateway_calls   bigint NOT NULL DEFAULT 0,
  policy          jsonb NOT NULL,
  last_pruned_at  timestamptz NOT NULL DEFAULT now()
);
