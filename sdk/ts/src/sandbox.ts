import { Zeish, enc, type WaitOptions, type BodyInit_ } from "./client.js";
import { ZeishError, makeError } from "./errors.js";
import type {
  Access, ErrorCode, ExecEvent, ExecRequest, FileInfo, GitStatus, Lineage, ProcessInfo, SandboxEvent, SandboxInfo,
  SandboxState, SizePreset, SnapshotInfo,
} from "./types.js";
import { Terminal, checkSize, terminalQuery, type TerminalInfo, type TerminalOptions, type WebSocketCtor } from "./terminal.js";
import { base64Decode, base64Encode, readLines, snakeKeys } from "./util.js";
import { Desktop } from "./desktop.js";

/** Options of Sandbox.create (camelCase; sent as the API's CreateSandboxRequest). */
export interface SandboxCreateOptions {
  /** Template name; default `base`. */
  template?: string;
  /** Sandbox name (hostname rules); generated when omitted. */
  name?: string;
  size?: SizePreset;
  vcpus?: number;
  memoryMib?: number;
  diskMib?: number;
  region?: string;
  env?: Record<string, string>;
  /** Like env, never returned by the API. */
  secrets?: Record<string, string>;
  /** Cloned before the sandbox runs (debian template); a token goes in `secrets.GIT_TOKEN`, never in the URL. */
  gitRepo?: string;
  gitBranch?: string;
  /** A pull request, checked out on branch `pr-N`. */
  prNumber?: number;
  /** Where to clone (default /home/user/workspace). */
  gitPath?: string;
  /** Pull ref pattern (default refs/pull/{n}/head). */
  gitPrRef?: string;
  /** The entry of `secrets` holding git's token (default GIT_TOKEN). */
  gitTokenSecret?: string;
  maxCostMicros?: number;
  browser?: boolean;
  desktop?: boolean;
  metadata?: Record<string, string>;
}

export interface ConnectionOptions {
  /** The client to use; default `new Zeish()` (env ZEISH_API_URL / ZEISH_API_KEY). */
  zeish?: Zeish;
  /** Lifetime asked for data-plane tokens, seconds (default: the server's, 15 min). */
  tokenTtlSeconds?: number;
}

export interface CreateCallOptions extends ConnectionOptions, WaitOptions {
  /** Wait until the sandbox runs (default true). */
  wait?: boolean;
}

export interface LifecycleOptions extends WaitOptions {
  /** Wait until the operation has settled (default true). */
  wait?: boolean;
}

export interface CloneOptions extends LifecycleOptions {
  /** How many children (1–16, default 1). */
  count?: number;
  /** The child's name; with count > 1 the children are `<name>-1` … `<name>-N`. */
  name?: string;
  gitBranch?: string;
  prNumber?: number;
  maxCostMicros?: number;
  browser?: boolean;
  desktop?: boolean;
  /** In a cluster: `parent` (default: every child on the parent's node, or 409 node_full) or `any` (those that do not fit there start on other nodes). */
  placement?: "parent" | "any";
}

export interface CloneResult {
  /** How long the parent was paused, ms. */
  pauseMs: number;
  /** The children, in order (running, unless wait was false). */
  sandboxes: Sandbox[];
}

export interface ExecOptions {
  /** Variables added to the sandbox's environment for this command. */
  env?: Record<string, string>;
  /** Working directory, absolute (default `/`). */
  cwd?: string;
  /** Run as this guest user (a name, uid or user:group); default the template's user, else root. */
  user?: string;
  /** Standard input. */
  stdin?: string | Uint8Array;
  /** Kill the command after this many seconds (0/undefined: no limit). */
  timeoutSeconds?: number;
  /** Called with each chunk of stdout as it arrives. */
  onStdout?: (chunk: string) => void;
  /** Called with each chunk of stderr as it arrives. */
  onStderr?: (chunk: string) => void;
  signal?: AbortSignal;
}

export interface ExecResult {
  exitCode: number;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  /** The signal that killed the command, if one did (e.g. `KILL`). */
  signal?: string;
  pid: number;
  durationMs: number;
}

export type WriteData =
  | string
  | Uint8Array
  | ArrayBuffer
  | Blob
  | ReadableStream<Uint8Array>
  | AsyncIterable<Uint8Array>;

const NOT_SETTLED: ReadonlySet<string> = new Set(["starting", "stopping", "deleting"]);

/**
 * The data plane of one sandbox: a cached access token (renewed shortly
 * before it expires) and requests against the URL `/access` returned.
 */
export class DataPlane {
  #access: Access | undefined;
  #obtained = 0;
  #pending: Promise<Access> | undefined;

  constructor(private readonly zeish: Zeish, private readonly id: string, private readonly ttl?: number) {}

  async access(force = false): Promise<Access> {
    const a = this.#access;
    if (!force && a) {
      const exp = Date.parse(a.expires_at);
      const margin = Math.min(60_000, (exp - this.#obtained) / 4);
      if (Date.now() < exp - margin) return a;
    }
    if (!this.#pending) {
      this.#pending = this.zeish.access(this.id, this.ttl).then(
        (acc) => {
          this.#access = acc;
          this.#obtained = Date.now();
          this.#pending = undefined;
          return acc;
        },
        (err) => {
          this.#pending = undefined;
          throw err;
        },
      );
    }
    return this.#pending;
  }

  forget(): void {
    this.#access = undefined;
  }

  /**
   * One data-plane request. A `token_expired` answer (clock skew) renews the
   * token and retries once, unless the body is a stream that cannot be resent.
   */
  async request(method: string, path: string, init: {
    query?: Record<string, string | number | boolean | undefined>;
    json?: unknown;
    body?: BodyInit_ | null;
    headers?: Record<string, string>;
    signal?: AbortSignal;
    replayable?: boolean;
  } = {}): Promise<Response> {
    for (let attempt = 0; ; attempt++) {
      const acc = await this.access(attempt > 0);
      try {
        return await this.zeish.request(method, acc.url + path, {
          absolute: true, token: acc.token,
          ...(init.query ? { query: init.query } : {}),
          ...(init.json !== undefined ? { json: init.json } : {}),
          ...(init.body !== undefined ? { body: init.body } : {}),
          ...(init.headers ? { headers: init.headers } : {}),
          ...(init.signal ? { signal: init.signal } : {}),
        });
      } catch (err) {
        const retry = attempt === 0 && init.replayable !== false && err instanceof ZeishError &&
          (err.code === "token_expired" || (err.code === "unauthenticated" && err.status === 401));
        if (!retry) throw err;
      }
    }
  }

  async json<T>(method: string, path: string, init: Parameters<DataPlane["request"]>[2] = {}): Promise<T> {
    const res = await this.request(method, path, init);
    if (res.status === 204) return undefined as T;
    return (await res.json()) as T;
  }
}

/** Files inside one sandbox. Paths are absolute. */
export class Files {
  constructor(private readonly dp: DataPlane) {}

  /** Reads a file: text (UTF-8) by default, `bytes` as a Uint8Array, `stream` as a ReadableStream. */
  read(path: string, opts?: { format?: "text"; signal?: AbortSignal }): Promise<string>;
  read(path: string, opts: { format: "bytes"; signal?: AbortSignal }): Promise<Uint8Array>;
  read(path: string, opts: { format: "stream"; signal?: AbortSignal }): Promise<ReadableStream<Uint8Array>>;
  async read(path: string, opts: { format?: "text" | "bytes" | "stream"; signal?: AbortSignal } = {}): Promise<string | Uint8Array | ReadableStream<Uint8Array>> {
    const res = await this.dp.request("GET", "/files", {
      query: { path }, headers: { accept: "application/octet-stream" }, ...(opts.signal ? { signal: opts.signal } : {}),
    });
    switch (opts.format ?? "text") {
      case "bytes": return new Uint8Array(await res.arrayBuffer());
      case "stream": return res.body ?? new ReadableStream<Uint8Array>({ start: (c) => c.close() });
      default: return res.text();
    }
  }

  /** Reads a file as bytes. */
  readBytes(path: string): Promise<Uint8Array> {
    return this.read(path, { format: "bytes" });
  }

  /**
   * Creates or replaces a file. Streams and async iterables are uploaded as
   * they yield, never held whole in memory. `mode` is the permission bits
   * (e.g. 0o755 or "755"; default 0644); `user` the owner in the guest
   * (default the template's user, else root).
   */
  async write(path: string, data: WriteData, opts: { mode?: number | string; user?: string; signal?: AbortSignal } = {}): Promise<FileInfo> {
    let body: BodyInit_;
    let replayable = true;
    if (typeof data === "string" || data instanceof Uint8Array || data instanceof ArrayBuffer || data instanceof Blob) {
      body = data as BodyInit_;
    } else if (data instanceof ReadableStream) {
      body = data as unknown as BodyInit_;
      replayable = false;
    } else {
      body = iterableToStream(data) as unknown as BodyInit_;
      replayable = false;
    }
    const mode = opts.mode === undefined ? undefined : typeof opts.mode === "number" ? opts.mode.toString(8).padStart(4, "0") : opts.mode;
    return this.dp.json<FileInfo>("PUT", "/files", {
      query: { path, mode, user: opts.user }, body, replayable, headers: { "content-type": "application/octet-stream" },
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
  }

  /** The entries of a directory. */
  async list(path: string): Promise<FileInfo[]> {
    const r = await this.dp.json<{ files: FileInfo[] }>("GET", "/files/list", { query: { path } });
    return r.files;
  }

  /** Describes one file; throws NotFoundError (`file_not_found`) if absent. */
  stat(path: string): Promise<FileInfo> {
    return this.dp.json("GET", "/files/stat", { query: { path } });
  }

  /** True when something exists at path. */
  async exists(path: string): Promise<boolean> {
    try {
      await this.stat(path);
      return true;
    } catch (err) {
      if (err instanceof ZeishError && err.code === "file_not_found") return false;
      throw err;
    }
  }

  /** Makes a directory; with `parents`, missing parents too and no error if it exists (mkdir -p). */
  mkdir(path: string, opts: { parents?: boolean } = {}): Promise<FileInfo> {
    return this.dp.json("POST", "/files/mkdir", { json: { path, ...(opts.parents ? { parents: true } : {}) } });
  }

  /** Removes a file, or with `recursive` a directory and all it holds. */
  async remove(path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    await this.dp.request("DELETE", "/files", { query: { path, recursive: opts.recursive || undefined } });
  }
}

function iterableToStream(it: AsyncIterable<Uint8Array>): ReadableStream<Uint8Array> {
  const iter = it[Symbol.asyncIterator]();
  return new ReadableStream<Uint8Array>({
    async pull(c) {
      const { value, done } = await iter.next();
      if (done) c.close();
      else c.enqueue(value);
    },
    async cancel() {
      await iter.return?.();
    },
  });
}

/** Processes inside one sandbox. */
export class Processes {
  constructor(private readonly dp: DataPlane) {}

  async list(): Promise<ProcessInfo[]> {
    const r = await this.dp.json<{ processes: ProcessInfo[] }>("GET", "/processes");
    return r.processes;
  }

  /** Sends a signal (name like `TERM` or a number; default `KILL`). */
  async kill(pid: number, signal?: string | number): Promise<void> {
    await this.dp.request("POST", `/processes/${pid}/kill`, { json: signal === undefined ? {} : { signal: String(signal) } });
  }
}

/** One snapshot of a sandbox. */
export class Snapshot {
  constructor(readonly info: SnapshotInfo, private readonly sandbox: Sandbox) {}
  get id(): string { return this.info.id; }
  get name(): string { return this.info.name; }
  restore(opts: LifecycleOptions = {}): Promise<SandboxInfo> { return this.sandbox.snapshots.restore(this.id, opts); }
  delete(): Promise<void> { return this.sandbox.snapshots.delete(this.id); }
}

/** The snapshots of one sandbox. */
export class Snapshots {
  constructor(private readonly sandbox: Sandbox) {}

  /** Saves the sandbox's disk and memory now (a running sandbox pauses only for a moment). */
  async create(opts: { name?: string } = {}): Promise<Snapshot> {
    const info = await this.sandbox.zeish.createSnapshot(this.sandbox.id, opts.name === undefined ? {} : { name: opts.name });
    return new Snapshot(info, this.sandbox);
  }

  /** The sandbox's snapshots, oldest first. */
  async list(): Promise<Snapshot[]> {
    return (await this.sandbox.zeish.listSnapshots(this.sandbox.id)).map((i) => new Snapshot(i, this.sandbox));
  }

  async get(id: string): Promise<Snapshot> {
    return new Snapshot(await this.sandbox.zeish.getSnapshot(id), this.sandbox);
  }

  /** Rolls the sandbox back to the snapshot; by default waits until it has settled. Returns the sandbox. */
  async restore(id: string, opts: LifecycleOptions = {}): Promise<SandboxInfo> {
    const r = await this.sandbox.zeish.restoreSnapshot(id);
    this.sandbox.info = r.sandbox;
    this.sandbox.forgetAccess();
    if (opts.wait === false) return r.sandbox;
    return this.sandbox.waitSettled(opts);
  }

  delete(id: string): Promise<void> {
    return this.sandbox.zeish.deleteSnapshot(id);
  }
}

/**
 * A sandbox: one isolated VM. Create one with `Sandbox.create`, reach an
 * existing one with `Sandbox.connect`.
 */
export class Sandbox {
  readonly zeish: Zeish;
  /** The sandbox as last seen (the API's Sandbox object). `refresh()` reloads it. */
  info: SandboxInfo;
  readonly files: Files;
  readonly processes: Processes;
  readonly snapshots: Snapshots;
  /** The desktop (sandboxes created or forked with `desktop: true`). */
  readonly desktop: Desktop;
  readonly #dp: DataPlane;
  readonly #ttl: number | undefined;

  protected constructor(zeish: Zeish, info: SandboxInfo, ttl?: number) {
    this.zeish = zeish;
    this.info = info;
    this.#ttl = ttl;
    this.#dp = new DataPlane(zeish, info.id, ttl);
    this.files = new Files(this.#dp);
    this.processes = new Processes(this.#dp);
    this.snapshots = new Snapshots(this);
    this.desktop = new Desktop(this.#dp, zeish, info.id);
  }

  /** Creates a sandbox and (by default) waits until it runs; throws SandboxStateError if its boot fails. */
  static async create(opts: SandboxCreateOptions = {}, call: CreateCallOptions = {}): Promise<Sandbox> {
    const zeish = call.zeish ?? new Zeish();
    const info = await zeish.createSandbox(snakeKeys(opts as Record<string, unknown>));
    const sb = new Sandbox(zeish, info, call.tokenTtlSeconds);
    if (call.wait === false) return sb;
    try {
      sb.info = await zeish.waitForState(info.id, "running", call);
    } catch (err) {
      // Leave nothing behind: a sandbox that did not come up is deleted.
      await zeish.deleteSandbox(info.id).catch(() => {});
      throw err;
    }
    return sb;
  }

  /** An existing sandbox by id (fails with NotFoundError if there is none). */
  static async connect(id: string, opts: ConnectionOptions = {}): Promise<Sandbox> {
    const zeish = opts.zeish ?? new Zeish();
    return new Sandbox(zeish, await zeish.getSandbox(id), opts.tokenTtlSeconds);
  }

  /** The account's sandboxes. */
  static async list(opts: ConnectionOptions & { state?: SandboxState[]; includeDestroyed?: boolean } = {}): Promise<Sandbox[]> {
    const zeish = opts.zeish ?? new Zeish();
    const list = await zeish.listSandboxes({
      ...(opts.state ? { state: opts.state } : {}), ...(opts.includeDestroyed ? { includeDestroyed: true } : {}),
    });
    return list.map((i) => new Sandbox(zeish, i, opts.tokenTtlSeconds));
  }

  get id(): string { return this.info.id; }
  get name(): string { return this.info.name; }
  get state(): SandboxState { return this.info.state; }

  /** Reloads `info` from the server. */
  async refresh(): Promise<SandboxInfo> {
    this.info = await this.zeish.getSandbox(this.id);
    return this.info;
  }

  /** Waits until the sandbox is in no transition; updates `info`. */
  async waitSettled(opts: WaitOptions = {}): Promise<SandboxInfo> {
    this.info = await this.zeish.waitSandbox(this.id, undefined, opts);
    return this.info;
  }

  /** Waits for a state; throws SandboxStateError if it settles elsewhere. */
  async waitFor(state: SandboxState, opts: WaitOptions = {}): Promise<SandboxInfo> {
    this.info = await this.zeish.waitForState(this.id, state, opts);
    return this.info;
  }

  /** @internal */
  forgetAccess(): void {
    this.#dp.forget();
  }

  /** A data-plane URL and token (cached, renewed before expiry). */
  access(): Promise<Access> {
    return this.#dp.access();
  }

  /** Opens an interactive terminal (an exec with a TTY) over a WebSocket. */
  async terminal(opts: TerminalOptions): Promise<Terminal> {
    const q = terminalQuery(opts);
    const acc = await this.#dp.access();
    q.set("access_token", acc.token);
    return Terminal.open(wsURL(acc.url + "/terminals/connect?" + q.toString()), opts.WebSocket);
  }

  /** Re-attaches to the terminal of pid (its recent output is replayed first). */
  async attachTerminal(pid: number, opts: { rows?: number; cols?: number; WebSocket?: WebSocketCtor } = {}): Promise<Terminal> {
    const q = new URLSearchParams();
    if (opts.rows !== undefined || opts.cols !== undefined) {
      checkSize(opts.rows ?? 0, opts.cols ?? 0);
      q.set("rows", String(opts.rows));
      q.set("cols", String(opts.cols));
    }
    const acc = await this.#dp.access();
    q.set("access_token", acc.token);
    return Terminal.open(wsURL(`${acc.url}/terminals/${pid}/connect?${q.toString()}`), opts.WebSocket);
  }

  /** The sandbox's terminals: running, and exited ones not yet collected. */
  async terminals(): Promise<TerminalInfo[]> {
    const list = await this.#dp.json<{ terminals: TerminalInfo[] }>("GET", "/terminals");
    return list.terminals;
  }

  /**
   * Runs a command: an argv array (no shell) or a string (run with `sh -c`).
   * Output is streamed to onStdout/onStderr as it arrives and collected.
   * A non-zero exit, a signal or a timeout is a result, not an error.
   */
  async exec(cmd: string | string[], opts: ExecOptions = {}): Promise<ExecResult> {
    const argv = typeof cmd === "string" ? ["sh", "-c", cmd] : cmd;
    const req: ExecRequest = { argv };
    if (opts.env) req.env = opts.env;
    if (opts.cwd) req.cwd = opts.cwd;
    if (opts.user) req.user = opts.user;
    if (opts.stdin !== undefined) req.stdin = base64Encode(typeof opts.stdin === "string" ? new TextEncoder().encode(opts.stdin) : opts.stdin);
    if (opts.timeoutSeconds) req.timeout_seconds = opts.timeoutSeconds;
    const res = await this.#dp.request("POST", "/exec", {
      json: req, headers: { accept: "application/x-ndjson" }, ...(opts.signal ? { signal: opts.signal } : {}),
    });
    if (!res.body) throw makeError(res.status, "internal", "exec: empty response");
    const decOut = new TextDecoder();
    const decErr = new TextDecoder();
    let stdout = "";
    let stderr = "";
    for await (const line of readLines(res.body)) {
      if (!line.trim()) continue;
      const ev = JSON.parse(line) as ExecEvent;
      switch (ev.type) {
        case "stdout": {
          const s = decOut.decode(base64Decode(ev.data ?? ""), { stream: true });
          stdout += s;
          if (s) opts.onStdout?.(s);
          break;
        }
        case "stderr": {
          const s = decErr.decode(base64Decode(ev.data ?? ""), { stream: true });
          stderr += s;
          if (s) opts.onStderr?.(s);
          break;
        }
        case "exit": {
          const r = ev.result;
          if (!r) throw makeError(200, "internal", "exec: exit event without a result");
          const tailOut = decOut.decode();
          const tailErr = decErr.decode();
          if (tailOut) { stdout += tailOut; opts.onStdout?.(tailOut); }
          if (tailErr) { stderr += tailErr; opts.onStderr?.(tailErr); }
          const out: ExecResult = {
            exitCode: r.exit_code, stdout, stderr, timedOut: r.timed_out, pid: r.pid, durationMs: r.duration_ms,
          };
          if (r.signal) out.signal = r.signal;
          return out;
        }
        case "error":
          throw makeError(200, (ev.error?.code ?? "internal") as ErrorCode, ev.error?.message ?? "exec failed");
        default:
          // newer event types are skipped
      }
    }
    throw makeError(200, "unavailable", "exec: the stream ended before the command did");
  }

  /**
   * Forks the sandbox while it runs: `count` children continue from this
   * instant, copy-on-write. By default waits until every child runs.
   */
  async clone(opts: CloneOptions = {}): Promise<CloneResult> {
    const { wait, timeoutSeconds, signal, ...rest } = opts;
    const r = await this.zeish.cloneSandbox(this.id, snakeKeys(rest as Record<string, unknown>));
    const children = r.sandboxes.map((i) => new Sandbox(this.zeish, i, this.#ttl));
    if (wait !== false) {
      const w: WaitOptions = {};
      if (timeoutSeconds !== undefined) w.timeoutSeconds = timeoutSeconds;
      if (signal) w.signal = signal;
      await Promise.all(children.map((c) => c.waitFor("running", w)));
    }
    return { pauseMs: r.pause_ms, sandboxes: children };
  }

  /** Alias of clone. */
  fork(opts: CloneOptions = {}): Promise<CloneResult> {
    return this.clone(opts);
  }

  /** The sandbox's ancestors and descendants. */
  lineage(): Promise<Lineage> {
    return this.zeish.lineage(this.id);
  }

  /** The sandbox's git clone: branch, HEAD commit, dirty files. */
  gitStatus(): Promise<GitStatus> {
    return this.zeish.gitStatus(this.id);
  }

  /** Follows the sandbox's state changes (server-sent events). */
  events(opts: { signal?: AbortSignal } = {}): AsyncGenerator<SandboxEvent> {
    return this.zeish.events(this.id, opts);
  }

  async #lifecycle(op: "start" | "stop" | "pause" | "resume", want: SandboxState, opts: LifecycleOptions): Promise<SandboxInfo> {
    this.info = await this.zeish.lifecycle(this.id, op);
    if (op !== "resume") this.#dp.forget();
    if (opts.wait === false) return this.info;
    return this.waitFor(want, opts);
  }

  /** Freezes the VM in memory. */
  pause(opts: LifecycleOptions = {}): Promise<SandboxInfo> { return this.#lifecycle("pause", "paused", opts); }
  /** Continues a paused VM. */
  resume(opts: LifecycleOptions = {}): Promise<SandboxInfo> { return this.#lifecycle("resume", "running", opts); }
  /** Suspends the VM to disk (memory kept, no compute used). */
  stop(opts: LifecycleOptions = {}): Promise<SandboxInfo> { return this.#lifecycle("stop", "stopped", opts); }
  /** Resumes a stopped VM where it was. */
  start(opts: LifecycleOptions = {}): Promise<SandboxInfo> { return this.#lifecycle("start", "running", opts); }

  /** Deletes the sandbox (and its snapshots); by default waits until it is destroyed. */
  async delete(opts: LifecycleOptions = {}): Promise<SandboxInfo> {
    this.info = await this.zeish.deleteSandbox(this.id);
    this.#dp.forget();
    if (opts.wait === false || !NOT_SETTLED.has(this.info.state)) return this.info;
    return this.waitSettled(opts);
  }

  /** Alias of delete, E2B style. */
  kill(opts: LifecycleOptions = {}): Promise<SandboxInfo> {
    return this.delete(opts);
  }

  toJSON(): SandboxInfo {
    return this.info;
  }
}

export { enc };

/** ws(s):// for an http(s):// data-plane URL. */
function wsURL(u: string): string {
  return u.replace(/^http/, "ws");
}
