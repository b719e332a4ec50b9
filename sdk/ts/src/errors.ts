import { ERROR_CODES, type ErrorCode } from "./types.js";

/**
 * Every failure the SDK reports. `status` is the HTTP status (0 when no
 * response came, e.g. a network error), `code` the API's stable error code,
 * `message` a human text. Branch on `err.code` (or on the subclasses):
 *
 *   try { await sbx.clone({ count: 4 }) }
 *   catch (e) { if (e instanceof ZeishError && e.code === "node_full") … }
 */
export class ZeishError extends Error {
  readonly status: number;
  readonly code: ErrorCode;
  /** Seconds to wait before retrying, from `Retry-After` (with `rate_limited`). */
  readonly retryAfter?: number;
  /** The failed request's id (`request_id`, the `X-Request-Id` header): zeishd's log has a server error's detail under it. */
  readonly requestId?: string;

  constructor(status: number, code: ErrorCode, message: string, opts: { cause?: unknown; retryAfter?: number; requestId?: string } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    if (opts.retryAfter !== undefined) this.retryAfter = opts.retryAfter;
    if (opts.requestId !== undefined) this.requestId = opts.requestId;
  }
}

/** 400: `invalid_argument`, `unknown_template`. */
export class InvalidArgumentError extends ZeishError {}
/** 401/403: `unauthenticated`, `token_expired`, `forbidden`. */
export class AuthenticationError extends ZeishError {}
/** 404: `not_found`, `file_not_found`. */
export class NotFoundError extends ZeishError {}
/** 409: `invalid_state`, `name_taken`, `file_exists`, `node_full`, `limit_reached`, `running_slots_full`, `storage_full`, `budget_exhausted`, `template_quota_reached`. */
export class ConflictError extends ZeishError {}
/** 413: `upload_too_large` (a template upload past 32 GiB or the account's template bytes quota). */
export class TooLargeError extends ZeishError {}
/** 429: `rate_limited` (see `retryAfter`), `daily_cap_reached`, `too_many_requests`, `account_calls_full`, `too_many_uploads`. */
export class RateLimitError extends ZeishError {}
/** 503 `timeout`: an operation or wait did not finish in time. */
export class TimeoutError extends ZeishError {}
/** 503 `unavailable`, 500 `internal`, or no answer at all. */
export class ServerError extends ZeishError {}

/**
 * A sandbox settled in a state other than the one waited for (e.g. `error`).
 * For a sandbox in `error`, `errorCode` is its stable `error_code`
 * (`boot_failed`, `boot_timeout`, …) and `errorMessage` its `error_message`
 * (for a failed boot, the guest console's last lines).
 */
export class SandboxStateError extends ConflictError {
  readonly sandboxId: string;
  readonly state: string;
  readonly stateReason?: string;
  readonly errorCode?: string;
  readonly errorMessage?: string;
  constructor(sandboxId: string, state: string, wanted: string, stateReason?: string, errorCode?: string, errorMessage?: string) {
    const why = errorCode ? `${errorCode}: ${errorMessage ?? stateReason ?? ""}` : stateReason;
    super(0, "invalid_state", `sandbox ${sandboxId} is ${state}, not ${wanted}${why ? `: ${why}` : ""}`);
    this.sandboxId = sandboxId;
    this.state = state;
    if (stateReason !== undefined) this.stateReason = stateReason;
    if (errorCode !== undefined) this.errorCode = errorCode;
    if (errorMessage !== undefined) this.errorMessage = errorMessage;
  }
}

const classByCode: Record<ErrorCode, new (s: number, c: ErrorCode, m: string, o?: { cause?: unknown; retryAfter?: number }) => ZeishError> = {
  internal: ServerError,
  invalid_argument: InvalidArgumentError,
  unknown_template: InvalidArgumentError,
  invalid_git_repo: InvalidArgumentError,
  git_credentials_in_url: InvalidArgumentError,
  invalid_git_ref: InvalidArgumentError,
  git_ref_conflict: InvalidArgumentError,
  no_git_repo: InvalidArgumentError,
  template_lacks_git: InvalidArgumentError,
  template_lacks_feature: InvalidArgumentError,
  unauthenticated: AuthenticationError,
  token_expired: AuthenticationError,
  forbidden: AuthenticationError,
  not_found: NotFoundError,
  file_not_found: NotFoundError,
  invalid_state: ConflictError,
  name_taken: ConflictError,
  file_exists: ConflictError,
  node_full: ConflictError,
  limit_reached: ConflictError,
  running_slots_full: ConflictError,
  storage_full: ConflictError,
  budget_exhausted: ConflictError,
  rate_limited: RateLimitError,
  daily_cap_reached: RateLimitError,
  too_many_requests: RateLimitError,
  account_calls_full: RateLimitError,
  timeout: TimeoutError,
  unavailable: ServerError,
  desktop_not_enabled: InvalidArgumentError,
  off_screen: InvalidArgumentError,
  unknown_secret: InvalidArgumentError,
  disk_too_small: InvalidArgumentError,
  invalid_accel: InvalidArgumentError,
  template_quota_reached: ConflictError,
  upload_too_large: TooLargeError,
  too_many_uploads: RateLimitError,
};

/** The code a status implies when the body names none (a proxy's error page, say). */
function codeForStatus(status: number): ErrorCode {
  switch (status) {
    case 400: return "invalid_argument";
    case 401: return "unauthenticated";
    case 403: return "forbidden";
    case 404: return "not_found";
    case 409: return "invalid_state";
    case 413: return "upload_too_large";
    case 429: return "rate_limited";
    case 502: return "unavailable";
    case 503: return "unavailable";
    case 504: return "timeout";
    default: return "internal";
  }
}

export function isErrorCode(v: unknown): v is ErrorCode {
  return typeof v === "string" && (ERROR_CODES as readonly string[]).includes(v);
}

/** Builds the fitting ZeishError subclass for a code. */
export function makeError(status: number, code: ErrorCode, message: string, opts: { cause?: unknown; retryAfter?: number; requestId?: string } = {}): ZeishError {
  const Cls = classByCode[code] ?? ZeishError;
  return new Cls(status, code, message, opts);
}

/** Turns a non-2xx response into a ZeishError, reading the JSON envelope. */
export async function errorFromResponse(res: Response): Promise<ZeishError> {
  const text = await res.text().catch(() => "");
  let code: ErrorCode = codeForStatus(res.status);
  let message = text.trim() || res.statusText || `HTTP ${res.status}`;
  let requestId = res.headers.get("x-request-id") ?? undefined;
  try {
    const env = JSON.parse(text) as { error?: { code?: unknown; message?: unknown; request_id?: unknown } };
    if (env?.error) {
      if (isErrorCode(env.error.code)) code = env.error.code;
      if (typeof env.error.message === "string") message = env.error.message;
      if (typeof env.error.request_id === "string") requestId = env.error.request_id;
    }
  } catch {
    // not JSON: keep the status's code and the raw text
  }
  const ra = res.headers.get("retry-after");
  const retryAfter = ra !== null && /^\d+$/.test(ra.trim()) ? Number(ra.trim()) : undefined;
  return makeError(res.status, code, message, {
    ...(retryAfter === undefined ? {} : { retryAfter }),
    ...(requestId === undefined ? {} : { requestId }),
  });
}

/** True when err is a ZeishError, and (if given) has one of the codes. */
export function isZeishError(err: unknown, ...codes: ErrorCode[]): err is ZeishError {
  return err instanceof ZeishError && (codes.length === 0 || codes.includes(err.code));
}
