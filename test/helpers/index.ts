// What integration tests share. See each file for details.
export { createTestDatabase, testDatabaseServer, resolveTestDatabaseServer, dropStaleTestDatabases } from './database';
export type { TestDatabase, TestDatabaseServer } from './database';
export { startTemporal, uniqueTaskQueue, workflowBundle } from './temporal';
export type { StartTemporalOptions } from './temporal';
export { freePort } from './ports';
