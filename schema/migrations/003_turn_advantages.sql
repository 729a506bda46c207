-- The advantage each turn received in its step's update (issue #16: the episode
-- page shows it). Written with the update's commit, in the same transaction;
-- NULL where none was received: eval turns, failed episodes, samples the
-- estimator excluded (e.g. MC-GRPO pivots), an update that was skipped, or a
-- step not yet committed.
ALTER TABLE turns ADD COLUMN advantage double precision;
