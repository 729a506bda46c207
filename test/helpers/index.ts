// What integration tests share. See each file for details.
export { createTestDatabase, testDatabaseServer, resolveTestDatabaseServer, dropStaleTestDatabases } from '../../testing/database';
export type { TestDatabase, TestDatabaseServer } from '../../testing/database';
export { startTemporal, uniqueTaskQueue, workflowBundle } from '../../testing/temporal';
export type { StartTemporalOptions } from '../../testing/temporal';
export { freePort } from '../../testing/ports';
export { fileStack, type FileStack } from './file-stack';
