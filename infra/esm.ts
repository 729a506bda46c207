/**
 * A real dynamic import() from CommonJS code: ES-only packages (vega, the MCP SDK) are loaded
 * with it, and the workflow bundler does not follow it, so team code that may run in the
 * workflow sandbox can name such a package without bundling it. The function is made on the
 * first call, never while a module loads.
 */
let load: ((m: string) => Promise<unknown>) | undefined;

export function esmImport<T>(specifier: string): Promise<T> {
  // eslint-disable-next-line @typescript-eslint/no-implied-eval -- a constant body: the only way to a real import() from CommonJS
  load ??= new Function('m', 'return import(m)') as (m: string) => Promise<unknown>;
  return load(specifier) as Promise<T>;
}
