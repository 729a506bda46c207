/** The pool (task queue) that serves a model unless its team or the deployment names another. */
export const DEFAULT_POOL = 'troupe-gpu';
