// The command registry: name → lazy loader. Adding a command = one file + one line here.
// (require, not import(): cli/bin.js loads TypeScript through tsx's CommonJS hook.)
import type { Command } from '../command';

export const commands: Record<string, () => Promise<Command>> = {
  up: async () => (require('./up') as typeof import('./up')).default,
  down: async () => (require('./down') as typeof import('./down')).default,
  ping: async () => (require('./ping') as typeof import('./ping')).default,
  doctor: async () => (require('./doctor') as typeof import('./doctor')).default,
  init: async () => (require('./init') as typeof import('./init')).default,
  train: async () => (require('./train') as typeof import('./train')).default,
  fork: async () => (require('./fork') as typeof import('./fork')).default,
  pipeline: async () => (require('./pipeline') as typeof import('./pipeline')).default,
  status: async () => (require('./status') as typeof import('./status')).default,
  list: async () => (require('./list') as typeof import('./list')).default,
  resume: async () => (require('./resume') as typeof import('./resume')).default,
  pause: async () => (require('./pause') as typeof import('./pause')).default,
  stop: async () => (require('./stop') as typeof import('./stop')).default,
  set: async () => (require('./set') as typeof import('./set')).default,
  plot: async () => (require('./plot') as typeof import('./plot')).default,
  export: async () => (require('./export') as typeof import('./export')).default,
  'export-model': async () => (require('./export-model') as typeof import('./export-model')).default,
  supervise: async () => (require('./supervise') as typeof import('./supervise')).default,
  dashboard: async () => (require('./dashboard') as typeof import('./dashboard')).default,
  worker: async () => (require('./worker') as typeof import('./worker')).default,
  gc: async () => (require('./gc') as typeof import('./gc')).default,
  'engine-check': async () => (require('./engine-check') as typeof import('./engine-check')).default,
};
