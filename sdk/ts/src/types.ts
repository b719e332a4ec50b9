// Wire types of the zeish API, taken from the generated src/schema.ts
// (`npm run gen` regenerates it from api/openapi.yaml).
import type { components } from "./schema.js";

type S = components["schemas"];

/** The stable code of an API error (see the ErrorCode schema). */
export type ErrorCode = S["ErrorCode"];
/** A sandbox as the API returns it (snake_case, exactly the `Sandbox` schema). */
export type SandboxInfo = S["Sandbox"];
export type SandboxState = S["State"];
export type SizePreset = S["SizePreset"];
export type Health = S["Health"];
export type CreateSandboxRequest = S["CreateSandboxRequest"];
export type CloneRequest = S["CloneRequest"];
export type Network = S["Network"];
export type NetworkRequest = S["NetworkRequest"];
export type NetworkPolicyRequest = S["NetworkPolicyRequest"];
export type PortInfo = S["Port"];
export type PortList = S["PortList"];
export type ListedPortInfo = S["ListedPort"];
export type CloneResponse = S["CloneResponse"];
export type Lineage = S["Lineage"];
/** GET …/git: a sandbox's clone (branch, HEAD, dirty files). */
export type GitStatus = S["GitStatus"];
export type LineageEntry = S["LineageEntry"];
export type SnapshotInfo = S["Snapshot"];
export type RestoreResponse = S["RestoreResponse"];
export type Access = S["Access"];
export type BrowserInfo = S["Browser"];
export type ExecRequest = S["ExecRequest"];
export type ExecEvent = S["ExecEvent"];
export type ExecResultWire = S["ExecResult"];
export type FileInfo = S["FileInfo"];
export type ProcessInfo = S["Process"];
export type DesktopAction = S["DesktopAction"];
export type DesktopActionResult = S["DesktopActionResult"];
export type DesktopStatus = S["DesktopStatus"];
export type SandboxEvent = S["Event"];
export type ErrorEnvelope = S["Error"];
/** An account (the `Account` schema). */
export type AccountInfo = S["Account"];
/** An API key as listed: its prefix, never the key (the `APIKey` schema). */
export type APIKeyInfo = S["APIKey"];
/** A new API key, with the key itself (`zk_…`), shown this once only. */
export type CreatedAPIKey = S["CreatedAPIKey"];
/** Micro-dollars per unit-second. */
export type Prices = S["Prices"];
export type Usage = S["Usage"];
export type SandboxUsage = S["SandboxUsage"];
export type UsageReport = S["UsageReport"];
export type PriceEstimate = S["PriceEstimate"];
/** A template (the `Template` schema): built-in, or built from an image. */
export type TemplateInfo = S["Template"];
export type BuildTemplateRequest = S["BuildTemplateRequest"];
/** One event of a template build's log (the `TemplateEvent` schema). */
export type TemplateEvent = S["TemplateEvent"];
/** An account secret as the server shows it: its name, never its value. */
export type SecretInfo = S["Secret"];

/** Every error code, for runtime checks. Kept equal to ErrorCode by the compiler. */
export const ERROR_CODES = [
  "internal",
  "invalid_argument",
  "unknown_template",
  "invalid_git_repo",
  "git_credentials_in_url",
  "invalid_git_ref",
  "git_ref_conflict",
  "no_git_repo",
  "template_lacks_git",
  "template_lacks_feature",
  "invalid_accel",
  "unauthenticated",
  "token_expired",
  "forbidden",
  "not_found",
  "file_not_found",
  "invalid_state",
  "name_taken",
  "file_exists",
  "node_full",
  "limit_reached",
  "running_slots_full",
  "storage_full",
  "budget_exhausted",
  "rate_limited",
  "daily_cap_reached",
  "too_many_requests",
  "account_calls_full",
  "timeout",
  "unavailable",
  "desktop_not_enabled",
  "off_screen",
  "unknown_secret",
  "disk_too_small",
  "template_quota_reached",
  "upload_too_large",
  "too_many_uploads",
] as const satisfies readonly ErrorCode[];

// Fails to compile if the schema gains a code the list above lacks.
type _AllCodesListed = Exclude<ErrorCode, (typeof ERROR_CODES)[number]> extends never ? true : never;
const _allCodesListed: _AllCodesListed = true;
void _allCodesListed;
