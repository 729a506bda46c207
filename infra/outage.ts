// Which Temporal client errors mean "the server is unreachable for now" (an outage to ride
// out: restart, network cut, overload) rather than a fault of the request or of Troupe.
// No imports: infra/errors.ts uses this, and team code (bundled into workflows) imports that.

/** gRPC status codes of an unreachable or overloaded server: UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED. */
const OUTAGE_CODES = new Set<number>([14, 4, 8, 10]);

/** A gRPC service error as @grpc/grpc-js rejects with (the shape @temporalio/client's isGrpcServiceError checks). */
function isGrpcServiceError(e: unknown): e is Error & { code: number } {
  return (
    e instanceof Error &&
    typeof (e as { details?: unknown }).details === 'string' &&
    typeof (e as { metadata?: unknown }).metadata === 'object' &&
    (e as { metadata?: unknown }).metadata !== null
  );
}

/** True when `err`, or an error in its cause chain, is a gRPC status of an unreachable server. */
export function isTemporalOutage(err: unknown): boolean {
  for (let e = err, depth = 0; e && depth < 8; e = (e as { cause?: unknown }).cause, depth++) {
    if (isGrpcServiceError(e) && OUTAGE_CODES.has(e.code)) return true;
  }
  return false;
}
