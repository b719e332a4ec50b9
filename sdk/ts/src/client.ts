/** A request body fetch accepts. */
export type BodyInit_ = NonNullable<RequestInit["body"]>;

import { ServerError, TimeoutError, ZeishError, errorFromResponse, SandboxStateError } from "./errors.js";
import type {
  Access, AccountInfo, APIKeyInfo, BrowserInfo, CloneRequest, CloneResponse, CreatedAPIKey, CreateSandboxRequest, GitStatus, Health, Lineage, NetworkPolicyRequest, PortInfo, PortList, ListedPortInfo,
  PriceEstimate, RestoreResponse, SandboxEvent, SandboxInfo, SandboxState, SizePreset, SnapshotInfo, UsageReport,
  BuildTemplateRequest, SecretInfo, TemplateEvent, TemplateInfo,
} from "./types.js";
import { envVar, readLines } from "./util.js";

export const DEFAULT_API_URL = "http://127.0.0.1:7420/api/v1";

export interface ZeishOptions {
  /** Base URL of the control plane, ending in `/api/v1`. Default: env `ZEISH_API_URL`, else http://127.0.0.1:7420/api/v1. */
  apiUrl?: string;
  /** API key (`zk_…`). Default: env `ZEISH_API_KEY`. */
  apiKey?: string;
  /** A fetch implementation; default the global one. */
  fetch?: typeof fetch;
}

/** How long calls that wait for a sandbox to settle wait at most, in total. */
export interface WaitOptions {
  /** Seconds to wait in total; default 600. */
  timeoutSeconds?: number;
  signal?: AbortSignal;
}

/** @internal Arguments of Zeish.request. */
export interface RequestInit2 {
  query?: Record<string, string | number | boolean | undefined>;
  json?: unknown;
  body?: BodyInit_ | null;
  headers?: Record<string, string>;
  signal?: AbortSignal;
  /** Use this bearer instead of the API key (data-plane tokens). */
  token?: string;
  /** An absolute URL instead of apiUrl + path. */
  absolute?: boolean;
}

/** The window of `Zeish.usage`: `[from, to)`, RFC 3339 strings or Dates. */
export interface UsageOptions {
  /** Start of the window; default the account's first sandbox. */
  from?: Date | string;
  /** End of the window; default (and at most) now. */
  to?: Date | string;
  signal?: AbortSignal;
}

/**
 * What `Zeish.estimate` prices: `sandboxes` sandboxes of one size running for
 * `minutes`. The size is a preset (`size`, default `small`) whose values
 * `vcpus`, `memoryMib` and `diskMib` override one by one; left-out fields take
 * the server's defaults (1 sandbox, 60 minutes).
 */
export interface EstimateOptions {
  /** How many sandboxes (1–10000, default 1). */
  sandboxes?: number;
  size?: SizePreset;
  vcpus?: number;
  memoryMib?: number;
  diskMib?: number;
  /** For how long (1–527040, default 60). */
  minutes?: number;
  signal?: AbortSignal;
}

const TRANSITIONS: ReadonlySet<string> = new Set(["starting", "stopping", "deleting"]);
/** Each POST /wait blocks at most this long, so no single HTTP exchange outlives client timeouts. */
const WAIT_SLICE_SECONDS = 60;

/**
 * The control-plane client: one API URL and key. Most code uses `Sandbox`
 * instead; `Zeish` holds the raw calls (snake_case bodies as in the API).
 */
export class Zeish {
  readonly apiUrl: string;
  readonly apiKey: string | undefined;
  /** Accounts and API keys (`/api/v1/admin`; admin keys only, others get `forbidden`). */
  readonly admin: Admin;
  readonly #fetch: typeof fetch;

  constructor(opts: ZeishOptions = {}) {
    this.apiUrl = (opts.apiUrl ?? envVar("ZEISH_API_URL") ?? DEFAULT_API_URL).replace(/\/+$/, "");
    this.apiKey = opts.apiKey ?? envVar("ZEISH_API_KEY");
    const f = opts.fetch ?? globalThis.fetch;
    if (typeof f !== "function") throw new Error("zeish: no fetch available (Node ≥ 18 or pass options.fetch)");
    this.#fetch = f.bind(globalThis);
    this.admin = new Admin(this);
  }

  /** The server root (apiUrl without `/api/v1`). */
  get serverUrl(): string {
    return this.apiUrl.replace(/\/api\/v1$/, "");
  }

  /**
   * Sends one request and returns the response if it is 2xx; otherwise
   * throws the ZeishError the error envelope describes.
   */
  async request(method: string, path: string, init: RequestInit2 = {}): Promise<Response> {
    const url = new URL(init.absolute ? path : this.apiUrl + path);
    for (const [k, v] of Object.entries(init.query ?? {})) {
      if (v !== undefined) url.searchParams.set(k, String(v));
    }
    const headers: Record<string, string> = { accept: "application/json", ...init.headers };
    const bearer = init.token ?? this.apiKey;
    if (bearer) headers.authorization = `Bearer ${bearer}`;
    let body: BodyInit_ | null | undefined = init.body;
    if (init.json !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(init.json);
    }
    const reqInit: RequestInit & { duplex?: "half" } = { method, headers };
    if (body !== undefined && body !== null) {
      reqInit.body = body;
      if (typeof ReadableStream !== "undefined" && body instanceof ReadableStream) reqInit.duplex = "half";
    }
    if (init.signal) reqInit.signal = init.signal;
    let res: Response;
    try {
      res = await this.#fetch(url, reqInit);
    } catch (err) {
      if (init.signal?.aborted) throw err;
      throw new ServerError(0, "unavailable", `${method} ${url.pathname}: ${(err as Error)?.message ?? err}`, { cause: err });
    }
    if (!res.ok) throw await errorFromResponse(res);
    return res;
  }

  /** request + JSON body (undefined for 204). */
  async json<T>(method: string, path: string, init: RequestInit2 = {}): Promise<T> {
    const res = await this.request(method, path, init);
    if (res.status === 204) return undefined as T;
    const text = await res.text();
    return (text ? JSON.parse(text) : undefined) as T;
  }

  // ---- health ------------------------------------------------------------

  health(): Promise<Health> {
    return this.json("GET", this.serverUrl + "/healthz", { absolute: true });
  }

  // ---- sandboxes ---------------------------------------------------------

  async listSandboxes(opts: { state?: SandboxState[]; includeDestroyed?: boolean } = {}): Promise<SandboxInfo[]> {
    const r = await this.json<{ sandboxes: SandboxInfo[] }>("GET", "/public/sandboxes", {
      query: { state: opts.state?.join(","), include_destroyed: opts.includeDestroyed || undefined },
    });
    return r.sandboxes;
  }

  /** POST /public/sandboxes; returns at once (state `starting`). */
  createSandbox(req: CreateSandboxRequest = {}): Promise<SandboxInfo> {
    return this.json("POST", "/public/sandboxes", { json: req });
  }

  getSandbox(id: string): Promise<SandboxInfo> {
    return this.json("GET", `/public/sandboxes/${enc(id)}`);
  }

  /**
   * PATCH /public/sandboxes/{id}/network: changes the egress policy while the
   * sandbox runs. Each field given replaces the sandbox's; `[]` clears a list.
   */
  setNetwork(id: string, req: NetworkPolicyRequest): Promise<SandboxInfo> {
    return this.json("PATCH", `/public/sandboxes/${enc(id)}/network`, { json: req });
  }

  /**
   * POST /public/sandboxes/{id}/ports: opens a guest port to requests without
   * a token (`public: true`) or closes it; says how the port is reached.
   */
  setPort(id: string, port: number, isPublic: boolean): Promise<PortInfo> {
    return this.json("POST", `/public/sandboxes/${enc(id)}/ports`, { json: { port, public: isPublic } });
  }

  /**
   * GET /public/sandboxes/{id}/ports: the TCP ports the guest listens on and
   * those opened to the public, with how each is reached.
   */
  async ports(id: string): Promise<ListedPortInfo[]> {
    const r: PortList = await this.json("GET", `/public/sandboxes/${enc(id)}/ports`);
    return r.ports;
  }

  /** DELETE; returns at once (state `deleting`). */
  deleteSandbox(id: string): Promise<SandboxInfo> {
    return this.json("DELETE", `/public/sandboxes/${enc(id)}`);
  }

  /** start / stop / pause / resume; returns at once. */
  lifecycle(id: string, op: "start" | "stop" | "pause" | "resume"): Promise<SandboxInfo> {
    return this.json("POST", `/public/sandboxes/${enc(id)}/${op}`);
  }

  /**
   * Waits until the sandbox is in no transition (or in `state`), by repeated
   * bounded POST …/wait calls. Returns the sandbox as it then is; throws
   * TimeoutError after opts.timeoutSeconds.
   */
  async waitSandbox(id: string, state?: SandboxState, opts: WaitOptions = {}): Promise<SandboxInfo> {
    const deadline = Date.now() + (opts.timeoutSeconds ?? 600) * 1000;
    for (;;) {
      const left = Math.ceil((deadline - Date.now()) / 1000);
      if (left <= 0) throw new TimeoutError(0, "timeout", `sandbox ${id} did not settle${state ? ` in ${state}` : ""} in time`);
      const body: { state?: SandboxState; timeout_seconds: number } = { timeout_seconds: Math.min(WAIT_SLICE_SECONDS, left) };
      if (state) body.state = state;
      try {
        const sb = await this.json<SandboxInfo>("POST", `/public/sandboxes/${enc(id)}/wait`, {
          json: body, ...(opts.signal ? { signal: opts.signal } : {}),
        });
        if (state ? sb.state === state || sb.state === "error" || sb.state === "destroyed" : !TRANSITIONS.has(sb.state)) return sb;
      } catch (err) {
        if (!(err instanceof ZeishError && err.code === "timeout")) throw err;
      }
    }
  }

  /** Waits for `state` and throws SandboxStateError if the sandbox settles elsewhere. */
  async waitForState(id: string, state: SandboxState, opts: WaitOptions = {}): Promise<SandboxInfo> {
    const sb = await this.waitSandbox(id, state, opts);
    if (sb.state !== state) throw new SandboxStateError(id, sb.state, state, sb.state_reason, sb.error_code, sb.error_message);
    return sb;
  }

  /** POST …/clone; returns at once with the children `starting`. */
  cloneSandbox(id: string, req: CloneRequest = {}): Promise<CloneResponse> {
    return this.json("POST", `/public/sandboxes/${enc(id)}/clone`, { json: req });
  }

  /** POST …/fork (the same operation as clone); returns at once with the children `starting`. */
  forkSandbox(id: string, req: CloneRequest = {}): Promise<CloneResponse> {
    return this.json("POST", `/public/sandboxes/${enc(id)}/fork`, { json: req });
  }

  lineage(id: string): Promise<Lineage> {
    return this.json("GET", `/public/sandboxes/${enc(id)}/lineage`);
  }

  /** GET …/git: the clone of a sandbox created with a git repository. */
  gitStatus(id: string): Promise<GitStatus> {
    return this.json("GET", `/public/sandboxes/${enc(id)}/git`);
  }

  /** A data-plane URL and token for one running sandbox. */
  access(id: string, ttlSeconds?: number): Promise<Access> {
    return this.json("POST", `/public/sandboxes/${enc(id)}/access`, { json: ttlSeconds ? { ttl_seconds: ttlSeconds } : {} });
  }

  /**
   * GET …/browser: the DevTools (CDP) endpoint of a sandbox created or forked with `browser: true`.
   * `cdp_url` carries a data-plane token: `puppeteer.connect({ browserWSEndpoint: b.cdp_url })` or
   * `chromium.connectOverCDP(b.cdp_url)` (Playwright).
   */
  browser(id: string, ttlSeconds?: number): Promise<BrowserInfo> {
    const q = ttlSeconds ? `?ttl_seconds=${ttlSeconds}` : "";
    return this.json("GET", `/public/sandboxes/${enc(id)}/browser${q}`);
  }

  /** Follows the sandbox's state changes (server-sent events) until the signal aborts or the server ends the stream. */
  async *events(id: string, opts: { signal?: AbortSignal } = {}): AsyncGenerator<SandboxEvent> {
    const res = await this.request("GET", `/public/sandboxes/${enc(id)}/events`, {
      headers: { accept: "text/event-stream" }, ...(opts.signal ? { signal: opts.signal } : {}),
    });
    if (!res.body) return;
    let data: string[] = [];
    for await (const line of readLines(res.body)) {
      if (line === "") {
        if (data.length) yield JSON.parse(data.join("\n")) as SandboxEvent;
        data = [];
      } else if (line.startsWith("data:")) {
        data.push(line.slice(5).replace(/^ /, ""));
      }
    }
  }

  // ---- usage and prices --------------------------------------------------

  /**
   * GET /public/usage: the account's usage and cost per sandbox (destroyed
   * ones included) and in total within `[from, to)`.
   */
  usage(opts: UsageOptions = {}): Promise<UsageReport> {
    return this.json("GET", "/public/usage", {
      query: { from: timeParam(opts.from), to: timeParam(opts.to) },
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
  }

  /** GET /public/pricing/estimate: the pricing calculator, at this server's prices. */
  estimate(opts: EstimateOptions = {}): Promise<PriceEstimate> {
    return this.json("GET", "/public/pricing/estimate", {
      query: {
        sandboxes: opts.sandboxes, size: opts.size, vcpus: opts.vcpus, memory_mib: opts.memoryMib,
        disk_mib: opts.diskMib, minutes: opts.minutes,
      },
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
  }

  // ---- templates ---------------------------------------------------------

  /**
   * POST /public/templates from a registry image (`from: "registry:host/repo:tag"`);
   * returns at once with the template `building`. Follow it with templateEvents or waitTemplate.
   */
  buildTemplate(req: BuildTemplateRequest, opts: { signal?: AbortSignal } = {}): Promise<TemplateInfo> {
    return this.json("POST", "/public/templates", { json: req, ...(opts.signal ? { signal: opts.signal } : {}) });
  }

  /**
   * Uploads an archive (`from: "docker-archive"` or `"oci-archive"`) and starts its build.
   * The archive is a Blob (a file from `fs.openAsBlob`, say), sent as multipart/form-data
   * without reading it into memory.
   */
  uploadTemplate(req: BuildTemplateRequest, archive: Blob, opts: { signal?: AbortSignal } = {}): Promise<TemplateInfo> {
    const form = new FormData();
    form.append("spec", JSON.stringify(req));
    form.append("image", archive, "image.tar");
    return this.json("POST", "/public/templates", { body: form, ...(opts.signal ? { signal: opts.signal } : {}) });
  }

  async listTemplates(): Promise<TemplateInfo[]> {
    const r = await this.json<{ templates: TemplateInfo[] }>("GET", "/public/templates");
    return r.templates;
  }

  /** A template by id or name. */
  getTemplate(ref: string): Promise<TemplateInfo> {
    return this.json("GET", `/public/templates/${enc(ref)}`);
  }

  /** Deletes a template; sandboxes created from it keep working. */
  deleteTemplate(ref: string): Promise<TemplateInfo> {
    return this.json("DELETE", `/public/templates/${enc(ref)}`);
  }

  /**
   * Stores (or replaces) an account secret; requests name it, e.g. buildTemplate's
   * `registry_secret` ("user:password" or a bearer token). The value is never returned.
   */
  putSecret(name: string, value: string): Promise<SecretInfo> {
    return this.json("PUT", `/public/secrets/${enc(name)}`, { json: { value } });
  }

  /** The account's secrets, by name. */
  async listSecrets(): Promise<SecretInfo[]> {
    const r = await this.json<{ secrets: SecretInfo[] }>("GET", "/public/secrets");
    return r.secrets;
  }

  /** Deletes an account secret. */
  async deleteSecret(name: string): Promise<void> {
    await this.request("DELETE", `/public/secrets/${enc(name)}`);
  }

  /** Replays a template's build log and follows it until the build ends. */
  async *templateEvents(ref: string, opts: { signal?: AbortSignal } = {}): AsyncGenerator<TemplateEvent> {
    const res = await this.request("GET", `/public/templates/${enc(ref)}/events`, {
      headers: { accept: "text/event-stream" }, ...(opts.signal ? { signal: opts.signal } : {}),
    });
    if (!res.body) return;
    let data: string[] = [];
    for await (const line of readLines(res.body)) {
      if (line === "") {
        if (data.length) yield JSON.parse(data.join("\n")) as TemplateEvent;
        data = [];
      } else if (line.startsWith("data:")) {
        data.push(line.slice(5).replace(/^ /, ""));
      }
    }
  }

  /** Waits for a build to end and returns the template (`ready`, or `error` with its `state_reason`). */
  async waitTemplate(ref: string, opts: { signal?: AbortSignal; onEvent?: (e: TemplateEvent) => void } = {}): Promise<TemplateInfo> {
    for await (const e of this.templateEvents(ref, opts.signal ? { signal: opts.signal } : {})) opts.onEvent?.(e);
    return this.getTemplate(ref);
  }

  // ---- snapshots ---------------------------------------------------------

  createSnapshot(sandboxId: string, req: { name?: string } = {}): Promise<SnapshotInfo> {
    return this.json("POST", `/public/sandboxes/${enc(sandboxId)}/snapshots`, { json: req });
  }

  async listSnapshots(sandboxId: string): Promise<SnapshotInfo[]> {
    const r = await this.json<{ snapshots: SnapshotInfo[] }>("GET", `/public/sandboxes/${enc(sandboxId)}/snapshots`);
    return r.snapshots;
  }

  getSnapshot(id: string): Promise<SnapshotInfo> {
    return this.json("GET", `/public/snapshots/${enc(id)}`);
  }

  async deleteSnapshot(id: string): Promise<void> {
    await this.request("DELETE", `/public/snapshots/${enc(id)}`);
  }

  /** POST …/restore; returns at once (the sandbox `starting` if it was running). */
  restoreSnapshot(id: string): Promise<RestoreResponse> {
    return this.json("POST", `/public/snapshots/${enc(id)}/restore`);
  }
}

/**
 * Accounts and API keys, under `/api/v1/admin`: `zeish.admin.…`. Every call
 * needs an admin account's key; another key gets AuthenticationError
 * `forbidden` (403).
 */
export class Admin {
  readonly #zeish: Zeish;

  constructor(zeish: Zeish) {
    this.#zeish = zeish;
  }

  /** Creates an account with no keys (name: 1–63 lower-case letters, digits or `-`, unique; else `name_taken`). */
  createAccount(name: string): Promise<AccountInfo> {
    return this.#zeish.json("POST", "/admin/accounts", { json: { name } });
  }

  /** Every account, oldest first. */
  async listAccounts(): Promise<AccountInfo[]> {
    const r = await this.#zeish.json<{ accounts: AccountInfo[] }>("GET", "/admin/accounts");
    return r.accounts;
  }

  /** Creates an API key for the account. Its `key` (`zk_…`) is in this answer only: zeish keeps just its hash. */
  createKey(accountId: string): Promise<CreatedAPIKey> {
    return this.#zeish.json("POST", `/admin/accounts/${enc(accountId)}/keys`, { json: {} });
  }

  /** API keys (their prefixes, never the keys), revoked ones included; of one account with `account`. */
  async listKeys(opts: { account?: string } = {}): Promise<APIKeyInfo[]> {
    const r = await this.#zeish.json<{ keys: APIKeyInfo[] }>("GET", "/admin/keys", { query: { account: opts.account } });
    return r.keys;
  }

  /**
   * Revokes a key by its id (`key_…`); it stops working at once. Returns the
   * key with its `revoked_at`. Revoking a revoked key changes nothing; the key
   * the request itself uses cannot be revoked (`invalid_state`).
   */
  revokeKey(id: string): Promise<APIKeyInfo> {
    return this.#zeish.json("DELETE", `/admin/keys/${enc(id)}`);
  }
}

function timeParam(t: Date | string | undefined): string | undefined {
  if (t === undefined) return undefined;
  return typeof t === "string" ? t : t.toISOString();
}

export function enc(s: string): string {
  return encodeURIComponent(s);
}
