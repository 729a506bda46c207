-- 006: version bytes by reference (infra/checkpoint-store.ts).
-- A version's weights and optimizer state are either inline (the bytea columns,
-- small models) or files of the checkpoint store named here with their size and
-- sha256; `troupe gc` may prune a version's bytes (pruned_at), keeping its row
-- (step, metrics, sha256) as history.
ALTER TABLE versions
  ALTER COLUMN weights DROP NOT NULL,
  ALTER COLUMN optimizer_state DROP NOT NULL,
  ADD COLUMN weights_file     text,
  ADD COLUMN weights_size     bigint,
  ADD COLUMN optimizer_file   text,
  ADD COLUMN optimizer_size   bigint,
  ADD COLUMN optimizer_sha256 text,
  ADD COLUMN pruned_at        timestamptz,
  ADD CONSTRAINT versions_bytes_stored CHECK (
    pruned_at IS NOT NULL
    OR (weights IS NOT NULL AND optimizer_state IS NOT NULL AND weights_file IS NULL AND optimizer_file IS NULL)
    OR (weights IS NULL AND optimizer_state IS NULL AND weights_file IS NOT NULL AND optimizer_file IS NOT NULL
        AND weights_size IS NOT NULL AND optimizer_size IS NOT NULL AND optimizer_sha256 IS NOT NULL)
  );
