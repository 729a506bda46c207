-- 005: the workflow patches (workflows/patches.ts) the code that ran each run knew. A Troupe
-- whose workflow code lacks one of them cannot replay that run's history, so its control
-- worker refuses the store instead of wedging the run (processes/control-worker.ts).
ALTER TABLE runs ADD COLUMN workflow_patches text[] NOT NULL DEFAULT '{}';
