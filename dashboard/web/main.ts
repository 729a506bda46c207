// The dashboard page: hash routes #/ (runs), #/runs/<id> (live curves, events, a step's
// episodes), #/compare?runs=a,b, #/episodes/<id> (turn graph and tokens), #/pipelines/<id>
// (its stages as a graph), one module each (runs-page.ts, run-page.ts, compare-page.ts,
// episode-page.ts, pipeline-page.ts). Charts are Vega-Lite specs
// rendered by Vega, the turn graph laid out by dagre; Vite bundles them (see infra/install.js).
// `window.troupe` (page.ts) exposes the views so tests can read what was drawn.
import { comparePage } from './compare-page';
import { episodePage } from './episode-page';
import { esc, main, message, polling } from './page';
import { pipelinePage } from './pipeline-page';
import { runPage } from './run-page';
import { runsPage } from './runs-page';

export { layout } from './episode-page';

// ---- routing ----
async function route() {
  polling.stop();
  window.troupe.views = {};
  window.troupe.ready = false;
  const [path, query] = location.hash.slice(1).split('?');
  const params = new URLSearchParams(query ?? '');
  const parts = (path || '/').split('/').filter(Boolean).map(decodeURIComponent);
  try {
    if (parts[0] === 'runs' && parts[1]) await runPage(parts[1], params);
    else if (parts[0] === 'episodes' && parts[1]) await episodePage(parts[1]);
    else if (parts[0] === 'compare') await comparePage(params);
    else if (parts[0] === 'pipelines' && parts[1]) await pipelinePage(parts[1]);
    else await runsPage(params);
  } catch (e) {
    main.innerHTML = `<p class="error">${esc(message(e))}</p>`;
  }
  window.troupe.ready = true;
}
// route() shows its own errors in the page.
window.addEventListener('hashchange', () => void route());
void route();
