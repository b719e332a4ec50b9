// The console's one door to zeishd: the public API under /console/api/v1
// (session cookie + the CSRF header) and, with a token from /access, the
// sandbox's data plane.

export class ApiError extends Error {
  constructor(readonly status: number, readonly code: string, message: string) {
    super(message);
  }
}

export type State = "starting" | "running" | "paused" | "stopping" | "stopped" | "deleting" | "destroyed" | "error";

export interface Sandbox {
  id: string; name: string; account_id: string; state: State; state_reason?: string; template: string;
  vcpus: number; memory_mib: number; disk_mib: number; region: string; host: string; hostname: string;
  address: string; accel?: string; parent_id?: string; env: Record<string, string>; git_repo?: string;
  git_branch?: string; browser: boolean; desktop: boolean; cost_micros: number; created_at: string;
  updated_at: string; destroyed_at?: string;
  [k: string]: unknown;
}
export interface Snapshot { id: string; name: string; sandbox_id: string; created_at: string; [k: string]: unknown }
export interface LineageEntry { id: string; name: string; state: State; parent_id?: string; created_at: string }
export interface Lineage { sandbox: LineageEntry; ancestors: LineageEntry[]; descendants: LineageEntry[] }
export interface FileInfo { name: string; path: string; size: number; mode: string; is_dir: boolean; mod_time: string }
export interface Account { id: string; name: string; admin: boolean; created_at: string }
export interface Session { account: Account; plan: { running_slots: number; creates_per_minute: number; daily_creates: number } }
export interface Usage { running_seconds: number; compute_micros: number; storage_micros: number; cost_micros: number }
export interface UsageReport { from: string; to: string; total: Usage; sandboxes: { sandbox_id: string; name: string; state: State; usage: Usage }[] }
export interface APIKey { id: string; account_id: string; prefix: string; created_at: string; revoked_at?: string }
export interface Access { url: string; token: string; expires_at: string }

async function fail(res: Response): Promise<never> {
  const text = await res.text().catch(() => "");
  let code = "http_" + res.status, message = text || res.statusText;
  try {
    const e = JSON.parse(text) as { error?: { code: string; message: string } };
    if (e.error) ({ code, message } = e.error);
  } catch { /* not JSON */ }
  if (res.status === 401 && !location.hash.startsWith("#/login")) location.hash = "#/login";
  throw new ApiError(res.status, code, message);
}

/** A call of the console API; path is below /console/api. */
export async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const init: RequestInit = { method, credentials: "same-origin", headers: { "X-Zeish-Console": "1" } };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    (init.headers as Record<string, string>)["Content-Type"] = "application/json";
  }
  const res = await fetch("/console/api" + path, init);
  if (!res.ok) return fail(res);
  if (res.status === 204) return undefined as T;
  return (await res.json()) as T;
}

export const pub = <T>(method: string, path: string, body?: unknown) => call<T>(method, "/v1/public" + path, body);

const accessCache = new Map<string, Access>();

/** A data-plane URL and token for a sandbox, renewed a minute before expiry. */
export async function access(id: string): Promise<Access> {
  const a = accessCache.get(id);
  if (a && Date.parse(a.expires_at) - Date.now() > 60_000) return a;
  const fresh = await pub<Access>("POST", `/sandboxes/${id}/access`, {});
  accessCache.set(id, fresh);
  return fresh;
}

/** A data-plane request. */
export async function data(id: string, method: string, path: string, query: Record<string, string>, body?: BodyInit): Promise<Response> {
  const a = await access(id);
  const u = new URL(a.url + path, location.href);
  for (const [k, v] of Object.entries(query)) u.searchParams.set(k, v);
  const init: RequestInit = { method, headers: { Authorization: "Bearer " + a.token } };
  if (body !== undefined) init.body = body;
  const res = await fetch(u, init);
  if (!res.ok) return fail(res);
  return res;
}

/** Upload through the console's bounded endpoint. */
export async function upload(id: string, path: string, file: Blob): Promise<FileInfo> {
  const res = await fetch(`/console/api/sandboxes/${id}/files?path=${encodeURIComponent(path)}`, {
    method: "PUT", credentials: "same-origin", headers: { "X-Zeish-Console": "1", "Content-Type": "application/octet-stream" }, body: file,
  });
  if (!res.ok) return fail(res);
  return (await res.json()) as FileInfo;
}

export function money(micros: number): string {
  return "$" + (micros / 1e6).toFixed(micros < 1e4 ? 6 : 4);
}

/** An error in words for the page. */
export function explain(e: unknown): string {
  if (e instanceof ApiError) return `${e.message} (${e.code})`;
  return e instanceof Error ? e.message : String(e);
}
