// Edits a team of the checkout's examples project as a user would (a comment line appended to
// examples/teams/math.ts), which changes the team-code hash; the returned function restores it.
import * as fs from 'node:fs';
import * as path from 'node:path';

export const EDITED_TEAM = path.join(__dirname, '..', '..', 'examples', 'teams', 'math.ts');

export function editTeam(): () => void {
  const original = fs.readFileSync(EDITED_TEAM, 'utf8');
  fs.appendFileSync(EDITED_TEAM, `// edited by a test (pid ${process.pid})\n`);
  return () => fs.writeFileSync(EDITED_TEAM, original);
}
