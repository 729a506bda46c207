// When the set-up rebuilds the dashboard's page: missing, or older than its sources or packages.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { it } from 'node:test';
import { dashboardStaleReason } from '../../../stack/install.js';

it('rebuilds the dashboard page when dist is missing or older than dashboard/web or node_modules', () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-build-'));
  try {
    const file = (rel: string, seconds: number) => {
      const p = path.join(root, rel);
      fs.mkdirSync(path.dirname(p), { recursive: true });
      fs.writeFileSync(p, '');
      fs.utimesSync(p, seconds, seconds);
    };
    file('dashboard/web/main.js', 1000);
    file('dashboard/web/nested/part.js', 1000);
    file('node_modules/.package-lock.json', 1000);
    assert.equal(dashboardStaleReason(root), 'the dashboard page is not built');
    file('dashboard/dist/index.html', 2000);
    assert.equal(dashboardStaleReason(root), undefined);
    file('dashboard/web/nested/part.js', 3000); // a source edited after the build, however deep
    assert.equal(dashboardStaleReason(root), 'the dashboard page is older than its sources');
    file('dashboard/dist/index.html', 4000);
    assert.equal(dashboardStaleReason(root), undefined);
    file('node_modules/.package-lock.json', 5000); // packages reinstalled (e.g. a new vega)
    assert.equal(dashboardStaleReason(root), 'the dashboard page is older than its sources');
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
});
