/**
 * Vega-Lite spec -> SVG (vega, headless) -> PNG (resvg), the charting path of
 * cli/plot.ts, for benchmark figures with their own layout.
 */

// vega and vega-lite are ES modules; load them from CommonJS with a real dynamic import.
const esm = new Function('m', 'return import(m)') as <T>(m: string) => Promise<T>;

export async function renderVegaLite(spec: Record<string, unknown>): Promise<{ svg: string; png: Uint8Array }> {
  const vl = await esm<{ compile(spec: unknown): { spec: unknown } }>('vega-lite');
  const vega = await esm<typeof import('vega')>('vega');
  const compiled = vl.compile({ $schema: 'https://vega.github.io/schema/vega-lite/v6.json', background: 'white', ...spec }).spec;
  const view = new vega.View(vega.parse(compiled as never), { renderer: 'none' });
  const svg = await view.toSVG();
  view.finalize();
  const { Resvg } = await import('@resvg/resvg-js');
  const png = new Resvg(svg, { fitTo: { mode: 'zoom', value: 1.5 }, background: 'white' }).render().asPng();
  return { svg, png: new Uint8Array(png) };
}
