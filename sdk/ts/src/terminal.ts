// Terminals: an exec with a TTY over a WebSocket (see openTerminal in
// api/openapi.yaml). Works with any WHATWG WebSocket: the browser's, Node 22's
// global one, or Node 20's with --experimental-websocket.
import { ZeishError, makeError } from "./errors.js";
import type { ErrorCode, ExecResultWire } from "./types.js";

/** The part of the WHATWG WebSocket a Terminal uses. */
export interface WebSocketLike {
  binaryType: string;
  readyState: number;
  send(data: string | Uint8Array): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: "open" | "message" | "close" | "error", listener: (ev: any) => void): void;
}

export type WebSocketCtor = new (url: string) => WebSocketLike;

export interface TerminalOptions {
  /** The command; none runs the user's login shell. */
  argv?: string[];
  env?: Record<string, string>;
  /** Working directory, absolute (default: the user's home). */
  cwd?: string;
  /** A user of the guest (default root). */
  user?: string;
  /** Window size in character cells, 1–1000. */
  rows: number;
  cols: number;
  /** A WebSocket constructor; default `globalThis.WebSocket`. */
  WebSocket?: WebSocketCtor;
}

/** One of a sandbox's terminals (`GET …/terminals`). */
export interface TerminalInfo {
  pid: number;
  argv: string[];
  user: string;
  attached: boolean;
  exited: boolean;
  result?: ExecResultWire;
  size: { rows: number; cols: number };
}

interface TermEvent {
  type: "started" | "exit" | "refused" | "error";
  pid?: number;
  result?: ExecResultWire;
  error?: { code: ErrorCode; message: string };
}

export const MAX_TERMINAL_SIZE = 1000;

/** Throws InvalidArgumentError unless rows and cols are a window size. */
export function checkSize(rows: number, cols: number): void {
  const ok = (n: number) => Number.isInteger(n) && n >= 1 && n <= MAX_TERMINAL_SIZE;
  if (!ok(rows) || !ok(cols)) {
    throw makeError(400, "invalid_argument", `terminal size ${rows}x${cols}: rows and cols must be within 1..${MAX_TERMINAL_SIZE}`);
  }
}

/** The query of a new terminal. */
export function terminalQuery(opts: TerminalOptions): URLSearchParams {
  checkSize(opts.rows, opts.cols);
  const q = new URLSearchParams({ rows: String(opts.rows), cols: String(opts.cols) });
  for (const a of opts.argv ?? []) q.append("argv", a);
  for (const [k, v] of Object.entries(opts.env ?? {})) q.append("env", `${k}=${v}`);
  if (opts.cwd) q.set("cwd", opts.cwd);
  if (opts.user) q.set("user", opts.user);
  return q;
}

/**
 * An interactive process in a sandbox. Output arrives through onData;
 * `exited` settles when the process ends (or rejects when the connection ends
 * first: the process then goes on in the sandbox for 10 minutes, and
 * Sandbox.attachTerminal(pid) picks it up again). close() only detaches.
 */
export class Terminal {
  /** The process id in the sandbox. */
  readonly pid: number;
  /** How the process ended. */
  readonly exited: Promise<ExecResultWire>;
  #onData: ((chunk: Uint8Array) => void) | undefined;
  /**
   * Called with every chunk of output (the first ones replay the scrollback
   * on attach). Output that arrives before it is set is kept and handed over
   * when it is: a replay can arrive in the same tick as `started`.
   */
  set onData(fn: (chunk: Uint8Array) => void) {
    this.#onData = fn;
    for (const c of this.#pending.splice(0)) fn(c);
  }
  get onData(): (chunk: Uint8Array) => void {
    return this.#onData ?? ((c) => this.#pending.push(c));
  }
  /** Called when the server refused a resize or signal (the terminal goes on). */
  onRefused: (err: ZeishError) => void = () => {};
  readonly #ws: WebSocketLike;
  #pending: Uint8Array[] = [];

  private constructor(ws: WebSocketLike, pid: number, exited: Promise<ExecResultWire>) {
    this.#ws = ws;
    this.pid = pid;
    this.exited = exited;
  }

  /** Opens the WebSocket at url (token in its query) and waits for `started`. */
  static open(url: string, Ctor?: WebSocketCtor): Promise<Terminal> {
    const C = Ctor ?? (globalThis as { WebSocket?: WebSocketCtor }).WebSocket;
    if (!C) {
      return Promise.reject(new ZeishError(0, "invalid_argument",
        "no WebSocket here: pass TerminalOptions.WebSocket (Node 20: run with --experimental-websocket)"));
    }
    const ws = new C(url);
    ws.binaryType = "arraybuffer";
    return new Promise((resolve, reject) => {
      let term: Terminal | undefined;
      let settle: { ok: (r: ExecResultWire) => void; fail: (e: unknown) => void } | undefined;
      const exited = new Promise<ExecResultWire>((ok, fail) => { settle = { ok, fail }; });
      exited.catch(() => {}); // a caller that never awaits it must not see an unhandled rejection
      let done = false;
      const early: Uint8Array[] = [];
      const finish = (err: ZeishError | undefined, res?: ExecResultWire) => {
        if (done) return;
        done = true;
        if (err) settle!.fail(err);
        else settle!.ok(res!);
      };
      ws.addEventListener("message", (ev: { data: unknown }) => {
        if (typeof ev.data !== "string") {
          const chunk = new Uint8Array(ev.data as ArrayBuffer);
          if (term) term.onData(chunk);
          else early.push(chunk);
          return;
        }
        let msg: TermEvent;
        try {
          msg = JSON.parse(ev.data) as TermEvent;
        } catch {
          return;
        }
        switch (msg.type) {
          case "started":
            term = new Terminal(ws, msg.pid ?? 0, exited);
            term.#pending.push(...early);
            resolve(term);
            break;
          case "exit":
            finish(undefined, msg.result);
            break;
          case "refused":
            term?.onRefused(makeError(200, msg.error?.code ?? "internal", msg.error?.message ?? "refused"));
            break;
          case "error":
            finish(makeError(200, msg.error?.code ?? "internal", msg.error?.message ?? "terminal lost"));
            break;
        }
      });
      ws.addEventListener("close", (ev: { code?: number; reason?: string }) => {
        const err = new ZeishError(0, "unavailable",
          `terminal connection closed (${ev.code ?? "?"} ${ev.reason ?? ""}) before the process ended`);
        if (!term) reject(new ZeishError(0, "unavailable",
          "the terminal WebSocket was refused (check the size, user, command and token)"));
        finish(err);
      });
    });
  }

  /** Sends keystrokes (Ctrl-C is "\x03"). */
  write(data: string | Uint8Array): void {
    this.#ws.send(typeof data === "string" ? new TextEncoder().encode(data) : data);
  }

  /** Resizes the window; the foreground program gets SIGWINCH. */
  resize(rows: number, cols: number): void {
    checkSize(rows, cols);
    this.#ws.send(JSON.stringify({ type: "resize", rows, cols }));
  }

  /** Sends a signal ("INT", "TERM", …) to the foreground process group. */
  signal(name: string): void {
    this.#ws.send(JSON.stringify({ type: "signal", signal: name }));
  }

  /** Detaches; the process goes on in the sandbox. */
  close(): void {
    this.#ws.close(1000, "detach");
  }
}
