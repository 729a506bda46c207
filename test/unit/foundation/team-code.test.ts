// The team-code hash and which pollers run other team code (pure parts of processes/team-code.ts).
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { it } from 'node:test';
import { staleTeamCode, teamCodeHash, teamCodeOf, workerIdentity, type Poller } from '../../../processes/team-code';

it("hashes the relative paths and contents of the project's config, team modules and their local imports", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'team-code-'));
  try {
    const config = "export default { teams: { b: './b.ts' } };\n";
    const team = "import data from './data/a.json';\n";
    fs.writeFileSync(path.join(dir, 'troupe.config.ts'), config);
    fs.writeFileSync(path.join(dir, 'b.ts'), team);
    fs.mkdirSync(path.join(dir, 'data'));
    fs.writeFileSync(path.join(dir, 'data', 'a.json'), '{}');
    fs.writeFileSync(path.join(dir, 'unrelated.ts'), 'U');
    const project = { dir, configFile: path.join(dir, 'troupe.config.ts'), teamFiles: { b: path.join(dir, 'b.ts') }, estimatorFiles: [] };
    // Independent reference: sorted paths, each "path\0content\0"; unrelated.ts is not team code.
    const expected = createHash('sha256').update(`b.ts\0${team}\0data/a.json\0{}\0troupe.config.ts\0${config}\0`).digest('hex').slice(0, 12);
    assert.equal(teamCodeHash(project), expected);
    fs.writeFileSync(path.join(dir, 'unrelated.ts'), 'U2');
    assert.equal(teamCodeHash(project), expected, 'a file no team imports does not count');
    fs.writeFileSync(path.join(dir, 'data', 'a.json'), '{"x":1}');
    assert.notEqual(teamCodeHash(project), expected, 'an edit of a local import changes it');
    fs.writeFileSync(path.join(dir, 'data', 'a.json'), '{}');
    assert.equal(teamCodeHash(project), expected);
    fs.writeFileSync(path.join(dir, 'new.ts'), '');
    assert.notEqual(teamCodeHash({ ...project, teamFiles: { ...project.teamFiles, c: path.join(dir, 'new.ts') } }), expected, 'a new team changes it');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

it('finds the live pollers whose identity names other team code, or none', () => {
  assert.equal(teamCodeOf(workerIdentity('abc123abc123')), 'abc123abc123');
  assert.ok(workerIdentity('abc123abc123').startsWith(`${process.pid}@${os.hostname()} `), 'keeps the SDK default prefix `troupe up` waits for');
  const now = 1_000_000;
  const p = (identity: string, ageMs = 0): Poller => ({ taskQueue: 'q', kind: 'workflow', identity, lastAccessMs: now - ageMs });
  const alive = (pid: number) => pid !== 2;
  const pollers = [
    p('1@here team-code=aaaaaaaaaaaa'), // current
    p('1@here team-code=bbbbbbbbbbbb'), // stale
    p('2@here team-code=bbbbbbbbbbbb'), // stale but its process is gone
    p('3@there team-code=bbbbbbbbbbbb', 150_000), // not seen for 2.5 min
    p('4@there'), // says no team code
  ];
  assert.deepEqual(
    staleTeamCode(pollers, 'aaaaaaaaaaaa', now, 'here', alive).map((x) => x.identity),
    ['1@here team-code=bbbbbbbbbbbb', '4@there'],
  );
});
