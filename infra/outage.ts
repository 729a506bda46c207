// Which Temporal client errors mean "the server is unreachable for now" (an outage to ride
// out: restart, network cut, overload) rather than a fault of the request or of Troupe.
// Workflow-safe: infra/errors.ts imports this and the workflow bundle imports infra/errors.ts
// (via agents/teams), so no runtime import of @temporalio/client or @grpc/grpc-js (they pull
// in net, tls, http2: the bundler refuses them and no control worker could start).
import type { ServiceError } from '@grpc/grpc-js';
import { Status } from '@grpc/grpc-js/build/src/constants';

const OUTAGE_CODES = new Set<number>([Status.UNAVAILABLE, Status.DEADLINE_EXCEEDED, Status.RESOURCE_EXHAUSTED, Status.ABORTED]);

/** @temporalio/client's isGrpcServiceError, without importing the client. */
function isServiceError(e: unknown): e is ServiceError {
  return e instanceof Error && typeof (e as { details?: unknown }).details === 'string' && typeof (e as { metadata?: unknown }).metadata === 'object' && (e as { metadata?: unknown }).metadata !== null;
}

/** True when `err`, or an error in its cause chain, is a gRPC status of an unreachable server. */
export function isTemporalOutage(err: unknown): boolean {
  for (let e = err, depth = 0; e && depth < 8; e = (e as { cause?: unknown }).cause, depth++) {
    if (isServiceError(e) && OUTAGE_CODES.has(e.code)) return true;
  }
  return false;
}
