// What every page of the dashboard shares: its elements, formatting, Vega rendering, and
// `window.troupe`, which exposes the views so tests can read what was drawn.
import * as vega from 'vega';
import * as vegaLite from 'vega-lite';
import type { TopLevelSpec } from 'vega-lite';

declare global {
  interface Window {
    /** The views drawn and the polls done, for the browser tests. */
    troupe: { views: Record<string, vega.View>; polls: number; ready?: boolean };
  }
}

/** The element with this id; the page's HTML has it. */
export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`#${id} is not on the page`);
  return el as T;
}

export const main = byId('main');
export const crumbs = byId('crumbs');
export const POLL_MS = 2000;
window.troupe = { views: {}, polls: 0 };
/** Stops the live page's polling (a run's page sets it; the router calls it when the page is left). */
export const polling = { stop: (): void => {} };

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export const esc = (s: unknown): string => String(s ?? '').replace(/[&<>"']/g, (c) => ESCAPES[c] ?? c);
export const fmt = (x: unknown, d = 3): string =>
  x === null || x === undefined ? '–' : typeof x === 'number' ? (Number.isInteger(x) ? String(x) : x.toFixed(d)) : esc(x);
export const duration = (s: number): string => (s < 60 ? `${s.toFixed(0)}s` : s < 3600 ? `${(s / 60).toFixed(1)}m` : `${(s / 3600).toFixed(1)}h`);
export const message = (e: unknown): string => (e instanceof Error ? e.message : String(e));

export async function render(spec: TopLevelSpec, el: HTMLElement, name: string): Promise<vega.View> {
  const compiled = vegaLite.compile(spec).spec;
  const view = new vega.View(vega.parse(compiled), { renderer: 'svg', container: el, hover: true });
  await view.runAsync();
  window.troupe.views[name] = view;
  return view;
}

/** A form's fields as [name, text] pairs (the page's forms have no file inputs). */
export const formStrings = (f: FormData): [string, string][] => [...f].map(([k, v]) => [k, String(v)]);
