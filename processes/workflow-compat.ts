// Whether this Troupe's workflow code can replay the runs in a store (cli up and the control worker ask).
import * as path from 'node:path';
import { runsNeedingNewerCode } from '../activities/store/runs';
import type { Sql } from '../infra/db';
import { TroupeError } from '../infra/errors';
import { repoRoot } from '../infra/paths';
import { Patch } from '../workflows/patches';

/**
 * Refuses a store holding runs whose workflow code knew patches this Troupe lacks: it cannot
 * replay their histories (every workflow change is patched), and its worker would wedge them in
 * workflow-task retries. Nothing is touched; an older Troupe before this check never knew to refuse.
 */
export async function refuseNewerRuns(sql: Sql, known: readonly string[] = Object.values(Patch)): Promise<void> {
  const newer = await runsNeedingNewerCode(sql, known);
  if (newer.length === 0) return;
  const list = newer.map((r) => `${r.runId} (${r.status}: ${r.unknown.join(', ')})`).join('; ');
  throw new TroupeError(
    `this Troupe (${(require(path.join(repoRoot, 'package.json')) as { version: string }).version} at ${repoRoot}) is older than the workflow code of runs in its store: ${list}${newer.length === 5 ? '; ...' : ''}. It cannot replay them`,
    'upgrade Troupe where this worker runs (`npm install troupe@latest` in the project), or point it at another store (DATABASE_URL, or a project of its own)',
  );
}
