/**
 * Engine error reasons, shared by the engine (which raises them as gRPC
 * statuses with trailing metadata `troupe-error-reason`) and the client (which
 * turns them back into typed errors callers can branch on). The engine's reasons
 * and their gRPC statuses are data, in contract.json; the client adds its own three.
 */
import { status } from '@grpc/grpc-js';
import contract from './contract.json';

export const ERROR_REASON_METADATA = 'troupe-error-reason';

/** The reasons an engine raises, and the gRPC status each travels as: defined once, in contract.json (the Python engine reads it too). */
const ENGINE_REASONS = contract.errorReasons;
type EngineReason = keyof typeof ENGINE_REASONS;

/** Reasons the client gives itself: the engine was unreachable, or the call was cancelled or timed out. */
const CLIENT_REASONS = { UNAVAILABLE: 'UNAVAILABLE', CANCELLED: 'CANCELLED', DEADLINE_EXCEEDED: 'DEADLINE_EXCEEDED' } as const;
type ClientReason = keyof typeof CLIENT_REASONS;

export type ErrorReason = EngineReason | ClientReason;
/** Every reason by name (`ErrorReason.STALE_BASE === 'STALE_BASE'`). */
export const ErrorReason = Object.freeze(Object.fromEntries([...Object.keys(ENGINE_REASONS), ...Object.keys(CLIENT_REASONS)].map((r) => [r, r]))) as {
  readonly [R in ErrorReason]: R;
};

const statusNamed = (name: string): status => {
  const code = status[name as keyof typeof status] as status | undefined;
  if (code === undefined) throw new Error(`engines/protocol/contract.json: ${name} is not a gRPC status name`);
  return code;
};

export const REASON_STATUS = Object.freeze(
  Object.fromEntries(Object.entries({ ...ENGINE_REASONS, ...CLIENT_REASONS }).map(([reason, name]) => [reason, statusNamed(name)])),
) as Readonly<Record<ErrorReason, status>>;

/** Raised inside the engine; the gRPC layer maps it to a status + reason metadata. */
export class EngineFault extends Error {
  readonly code: status;
  constructor(
    readonly reason: ErrorReason,
    message: string,
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'EngineFault';
    this.code = REASON_STATUS[reason];
  }
}

export const invalid = (message: string) => new EngineFault(ErrorReason.INVALID_REQUEST, message);
