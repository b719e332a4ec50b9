export {
  Zeish, Admin, DEFAULT_API_URL, type ZeishOptions, type WaitOptions, type UsageOptions, type EstimateOptions,
} from "./client.js";
export {
  Sandbox, Files, Processes, Snapshot, Snapshots,
  type SandboxCreateOptions, type ConnectionOptions, type CreateCallOptions, type LifecycleOptions,
  type CloneOptions, type CloneResult, type ExecOptions, type ExecResult, type WriteData,
} from "./sandbox.js";
export { Desktop, type MouseButton } from "./desktop.js";
export {
  ZeishError, InvalidArgumentError, AuthenticationError, NotFoundError, ConflictError, TooLargeError, RateLimitError,
  TimeoutError, ServerError, SandboxStateError, isZeishError,
} from "./errors.js";
export {
  Terminal, checkSize, MAX_TERMINAL_SIZE, type TerminalOptions, type TerminalInfo, type WebSocketLike, type WebSocketCtor,
} from "./terminal.js";
export * from "./types.js";
export type { paths, components, operations } from "./schema.js";
