/**
 * The gateway's errors as OpenAI clients expect them: an HTTP status and
 * `{ error: { message, type, param, code } }`, `param` naming the request's
 * field (`messages[2].role`, `tools[0].function.parameters`). A request that
 * fails this way records nothing.
 */
export class GatewayError extends Error {
  override readonly name = 'GatewayError';
  constructor(
    readonly status: number,
    message: string,
    readonly param: string | null = null,
    readonly code: string | null = null,
    readonly type = status === 401 || status === 403 ? 'authentication_error' : status === 404 ? 'not_found_error' : 'invalid_request_error',
  ) {
    super(param ? `${param}: ${message}` : message);
  }

  body() {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/** A request field that is missing or malformed. */
export const invalid = (param: string, message: string) => new GatewayError(400, message, param, 'invalid_value');
