// Which Temporal client errors mean "the server is unreachable for now" (an outage to ride
// out: restart, network cut, overload) rather than a fault of the request or of Troupe.
import { status } from '@grpc/grpc-js';
import { isGrpcServiceError } from '@temporalio/client';

const OUTAGE_CODES = new Set<number>([status.UNAVAILABLE, status.DEADLINE_EXCEEDED, status.RESOURCE_EXHAUSTED, status.ABORTED]);

/** True when `err`, or an error in its cause chain, is a gRPC status of an unreachable server. */
export function isTemporalOutage(err: unknown): boolean {
  for (let e = err, depth = 0; e && depth < 8; e = (e as { cause?: unknown }).cause, depth++) {
    if (isGrpcServiceError(e) && OUTAGE_CODES.has(e.code)) return true;
  }
  return false;
}
