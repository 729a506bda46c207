/**
 * Engine error reasons, shared by the engine (which raises them as gRPC
 * statuses with trailing metadata `troupe-error-reason`) and the client (which
 * turns them back into typed errors callers can branch on).
 */
import { status } from '@grpc/grpc-js';

export const ERROR_REASON_METADATA = 'troupe-error-reason';

export const ErrorReason = {
  INVALID_REQUEST: 'INVALID_REQUEST',
  MODEL_NOT_LOADED: 'MODEL_NOT_LOADED',
  VERSION_NOT_LOADED: 'VERSION_NOT_LOADED',
  STALE_BASE: 'STALE_BASE',
  VERSION_CONFLICT: 'VERSION_CONFLICT',
  REQUEST_ID_REUSED: 'REQUEST_ID_REUSED',
  REFERENCE_UNREADABLE: 'REFERENCE_UNREADABLE',
  NON_FINITE_UPDATE: 'NON_FINITE_UPDATE',
  INTERNAL: 'INTERNAL',
  /** client side only: engine unreachable, call cancelled or timed out */
  UNAVAILABLE: 'UNAVAILABLE',
  CANCELLED: 'CANCELLED',
  DEADLINE_EXCEEDED: 'DEADLINE_EXCEEDED',
} as const;
export type ErrorReason = (typeof ErrorReason)[keyof typeof ErrorReason];

export const REASON_STATUS: Record<ErrorReason, status> = {
  INVALID_REQUEST: status.INVALID_ARGUMENT,
  MODEL_NOT_LOADED: status.NOT_FOUND,
  VERSION_NOT_LOADED: status.NOT_FOUND,
  STALE_BASE: status.FAILED_PRECONDITION,
  VERSION_CONFLICT: status.FAILED_PRECONDITION,
  REQUEST_ID_REUSED: status.FAILED_PRECONDITION,
  REFERENCE_UNREADABLE: status.FAILED_PRECONDITION,
  NON_FINITE_UPDATE: status.ABORTED,
  INTERNAL: status.INTERNAL,
  UNAVAILABLE: status.UNAVAILABLE,
  CANCELLED: status.CANCELLED,
  DEADLINE_EXCEEDED: status.DEADLINE_EXCEEDED,
};

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
