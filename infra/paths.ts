// Where things live on disk. No side effects on import.
import * as os from 'node:os';
import * as path from 'node:path';

/** The repository root (the folder holding package.json). */
export const repoRoot: string = path.resolve(__dirname, '..');

/** `$XDG_CACHE_HOME/troupe`, else `~/.cache/troupe`: tools Troupe builds for itself (the Temporal CLI). */
export function cacheDir(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.XDG_CACHE_HOME && env.XDG_CACHE_HOME.trim() !== '' ? env.XDG_CACHE_HOME : path.join(os.homedir(), '.cache');
  return path.join(base, 'troupe');
}

/** Folder for binaries Troupe builds (`<cacheDir>/bin`). */
export function cacheBinDir(env: NodeJS.ProcessEnv = process.env): string {
  return path.join(cacheDir(env), 'bin');
}
