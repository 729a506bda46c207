// The runs list (#/): filters, each run's progress and links, runs checked for comparing.
import { api, temporalLink, type RunSummary } from './data';
import { byId, crumbs, duration, esc, fmt, formStrings, main } from './page';

export async function runsPage(params: URLSearchParams) {
  crumbs.textContent = '/ runs';
  const team = params.get('team') ?? '';
  const status = params.get('status') ?? '';
  const q = new URLSearchParams({ limit: '100', ...(team ? { team } : {}), ...(status ? { status } : {}) });
  const { runs, total } = await api<{ runs: RunSummary[]; total: number }>(`/api/runs?${q}`);
  const rows = await Promise.all(
    runs.map(async (r) => {
      const t = await temporalLink(r.runId);
      return `<tr data-run="${esc(r.runId)}"><td><input type="checkbox" name="cmp" value="${esc(r.runId)}"> <a href="#/runs/${encodeURIComponent(r.runId)}">${esc(r.runId)}</a></td><td>${esc(r.team)}</td><td>${esc(r.status)}</td>
        <td>${r.step}${r.steps ? ' / ' + r.steps : ''}</td><td>${fmt(r.evalSuccess)}${r.evalStep !== null ? ` (step ${r.evalStep})` : ''}</td>
        <td>${new Date(r.startedAt).toLocaleString()}</td><td>${duration(r.durationSeconds)}</td><td>${t ? `<a href="${esc(t)}" target="_blank">Temporal UI</a>` : ''}</td></tr>`;
    }),
  );
  main.innerHTML = `
    <form class="filters" id="filters">team <input name="team" value="${esc(team)}" size="10">
      status <select name="status">${['', 'running', 'paused', 'completed', 'stopped', 'failed', 'terminated', 'timed-out', 'cancelled'].map((s) => `<option ${s === status ? 'selected' : ''}>${s}</option>`).join('')}</select>
      <button>filter</button> <span>${total} run(s)</span> <button type="button" id="compare">compare checked runs</button></form>
    <table id="runs"><tr><th>run</th><th>team</th><th>status</th><th>step</th><th>eval success</th><th>started</th><th>duration</th><th></th></tr>${rows.join('')}</table>`;
  byId('compare').onclick = () => {
    const ids = [...document.querySelectorAll<HTMLInputElement>('input[name=cmp]:checked')].map((x) => x.value);
    if (ids.length >= 2) location.hash = `#/compare?runs=${ids.map(encodeURIComponent).join(',')}`;
  };
  const filters = byId<HTMLFormElement>('filters');
  filters.onsubmit = (ev) => {
    ev.preventDefault();
    location.hash = `#/?${new URLSearchParams(formStrings(new FormData(filters)).filter(([, v]) => v))}`;
  };
}
