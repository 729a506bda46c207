-- Partial rollouts (issue #31).
-- A turn whose response was sampled by several versions (an episode carried
-- from one step into the next) keeps the version of each response token;
-- NULL: every token is the turn's version.
ALTER TABLE turns ADD COLUMN token_versions integer[];

-- Unfinished groups a step's rollout carries into the next step's: per
-- episode, either its finished scored episode (waiting for the rest of its
-- group) or the generations it made so far (replayed, never regenerated, when
-- the episode continues). Written in the same transaction as the step's
-- finished episodes and its marker below, so a crash loses or repeats none.
CREATE TABLE carried_episodes (
  run_id text NOT NULL,
  into_step integer NOT NULL,
  episode_id text NOT NULL,
  -- the step that planned the episode, and how many rollouts carried it so far
  from_step integer NOT NULL,
  carries integer NOT NULL,
  spec jsonb NOT NULL,
  -- the scored episode when it finished, else NULL
  finished jsonb,
  -- the generations so far: [{ seed, contextLength, tokens, logprobs, stopReason, version }]
  generations jsonb NOT NULL,
  PRIMARY KEY (run_id, into_step, episode_id)
);

-- One row per step whose partial rollout committed: a retried rollout activity returns it.
CREATE TABLE partial_rollouts (
  run_id text NOT NULL,
  step integer NOT NULL,
  result jsonb NOT NULL,
  PRIMARY KEY (run_id, step)
);
