import assert from 'node:assert/strict';
import { test } from 'node:test';
import { status } from '@grpc/grpc-js';
import { ServiceError } from '@temporalio/client';
import { formatError } from '../../../infra/errors';
import { isTemporalOutage } from '../../../infra/outage';

/** What @grpc/grpc-js rejects with: an Error with code, details and metadata. */
function grpcError(code: number, details: string): Error {
  return Object.assign(new Error(`${code} ${details}`), { code, details, metadata: {} });
}

test('an unreachable server, directly or as the cause of an SDK error, is an outage', () => {
  const refused = grpcError(status.UNAVAILABLE, 'No connection established. Last error: connect ECONNREFUSED 127.0.0.1:7233');
  assert.equal(isTemporalOutage(refused), true);
  assert.equal(isTemporalOutage(new ServiceError('Failed to get Workflow execution history', { cause: refused })), true);
  assert.equal(isTemporalOutage(grpcError(status.DEADLINE_EXCEEDED, 'Deadline exceeded')), true);
});

test('request errors and plain errors are not outages', () => {
  assert.equal(isTemporalOutage(grpcError(status.NOT_FOUND, 'workflow not found')), false);
  assert.equal(isTemporalOutage(grpcError(status.INVALID_ARGUMENT, 'bad')), false);
  assert.equal(isTemporalOutage(new Error('UNAVAILABLE')), false);
  assert.equal(isTemporalOutage(undefined), false);
});

test('the CLI never calls an outage a bug in Troupe', () => {
  const text = formatError(new ServiceError('Failed to get Workflow execution history', { cause: grpcError(status.UNAVAILABLE, 'connect ECONNREFUSED') }));
  assert.doesNotMatch(text, /bug in Troupe/);
  assert.match(text, /Temporal is unreachable/);
  assert.match(formatError(new Error('x')), /bug in Troupe/);
});

test('the outage codes are gRPC UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED and ABORTED', () => {
  for (const code of [status.UNAVAILABLE, status.DEADLINE_EXCEEDED, status.RESOURCE_EXHAUSTED, status.ABORTED])
    assert.equal(isTemporalOutage(grpcError(code, 'x')), true);
  for (const code of [status.OK, status.CANCELLED, status.UNKNOWN, status.PERMISSION_DENIED, status.INTERNAL])
    assert.equal(isTemporalOutage(grpcError(code, 'x')), false);
});
