-- 001: what the trivial end-to-end path needs (troupe ping).
-- schema_version itself is created by schema/migrate.ts.

create table pings (
  id          bigserial primary key,
  -- The workflow that wrote the row: a retried activity finds its row instead of adding one.
  workflow_id text not null unique,
  message     text not null,
  created_at  timestamptz not null default now()
);
