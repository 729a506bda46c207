-- The gateway's journal (issue #29, gateway/journal.ts): every gateway call a
-- batched episode completed, by its index in the episode and the hash of its
-- request, with what was sampled for it. A retried episode answers the calls
-- found here without sampling them again. The reply the agent saw is a
-- function of the request and these tokens (the gateway decodes and parses
-- them), so only the tokens are kept.
CREATE TABLE gateway_calls (
  episode_id     text NOT NULL,
  call_index     integer NOT NULL,
  run_id         text NOT NULL,
  agent          text NOT NULL,
  request_sha256 text NOT NULL,
  tokens         integer[] NOT NULL,
  logprobs       double precision[] NOT NULL,
  stop_reason    text NOT NULL,
  duration_ms    double precision NOT NULL,
  at             timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (episode_id, call_index)
);
CREATE INDEX gateway_calls_run ON gateway_calls (run_id);

-- Per-agent counters of an episode's trajectory (gatewayCalls, retokenizedTurns,
-- journalReplayedCalls...): kept with the episode, so the update that loads the
-- step's episodes from the store reports them as metrics.
ALTER TABLE episodes ADD COLUMN counters jsonb;
