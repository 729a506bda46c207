-- Per-turn reward components (issue #30): a reward function may score the turn
-- itself as well as the episode (agents/team.ts RewardFn `{ episode, turn }`).
-- Rows written before this migration are episode components.
ALTER TABLE rewards ADD COLUMN per_turn boolean NOT NULL DEFAULT false;
