// A real zeishd for the tests: bin/zeishd (from `make build`) on a temp data
// dir and a free loopback port, with the shared template cache the Go tests
// fill. stop() deletes every sandbox, stops zeishd, kills any VM process it
// left, and removes the temp dir; an exit hook does the same if the test
// process dies first.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Zeish } from "../src/index.js";

export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "go.mod"))) {
    const up = dirname(dir);
    if (up === dir) throw new Error("zeish repo root (go.mod) not found above " + fileURLToPath(import.meta.url));
    dir = up;
  }
  return dir;
}

export function cacheDir(): string {
  return process.env.ZEISH_TEST_CACHE || "/var/tmp/zeish-test-cache";
}

/** Why VM tests cannot run here, or undefined. Under CI a missing QEMU is an error, never a skip. */
export function vmSkipReason(): string | undefined {
  const missing = ["qemu-system-x86_64", "qemu-img"].filter((t) => spawnSync("sh", ["-c", `command -v ${t}`]).status !== 0);
  if (missing.length === 0) return undefined;
  const msg = `${missing.join(", ")} not found (apt-get install qemu-system-x86 qemu-utils)`;
  if (process.env.CI) throw new Error(`CI is set, refusing to skip VM tests: ${msg}`);
  return msg;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/** Pids of processes whose command line mentions dir/ (the VMs of one data dir). */
function processesUnder(dir: string): number[] {
  const pids: number[] = [];
  for (const e of readdirSync("/proc")) {
    const pid = Number(e);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    try {
      if (readFileSync(`/proc/${e}/cmdline`, "latin1").includes(dir + "/")) pids.push(pid);
    } catch {
      // gone already
    }
  }
  return pids;
}

export class Harness {
  readonly root = repoRoot();
  readonly dataDir: string;
  readonly apiUrl: string;
  readonly apiKey: string;
  readonly zeish: Zeish;
  /** Set by tests that fail, so stop() prints the server's log. */
  failed = false;
  #proc: ChildProcess | undefined;
  #log: string[] = [];
  #exited: Promise<void>;
  #onExit = () => this.#emergency();
  #onSignal = (sig: NodeJS.Signals) => {
    this.#emergency();
    process.exit(sig === "SIGINT" ? 130 : 143);
  };
  #seen = new Set<string>();

  private constructor(dataDir: string, port: number, proc: ChildProcess, exited: Promise<void>) {
    this.dataDir = dataDir;
    this.apiUrl = `http://127.0.0.1:${port}/api/v1`;
    this.#proc = proc;
    this.#exited = exited;
    this.apiKey = "";
    this.zeish = undefined as unknown as Zeish;
  }

  static async start(): Promise<Harness> {
    const root = repoRoot();
    const zeishd = join(root, "bin", "zeishd");
    const sandboxd = join(root, "bin", "sandboxd");
    for (const b of [zeishd, sandboxd]) {
      if (!existsSync(b)) throw new Error(`${b} is missing: run \`make build\` first`);
    }
    const dataDir = mkdtempSync(join(tmpdir(), "zeish-ts-test-"));
    const port = await freePort();
    const proc = spawn(zeishd, [], {
      env: {
        ...process.env,
        ZEISH_DATA_DIR: dataDir,
        ZEISH_LISTEN: `127.0.0.1:${port}`,
        // This zeishd runs in the host's network namespace: its sandboxes get
        // no network card, so no guest packet can reach a real network.
        ZEISH_NET: "off",
        ZEISH_SANDBOXD: sandboxd,
        ZEISH_TEMPLATE_CACHE: join(cacheDir(), "templates"),
        ZEISH_LOG_LEVEL: "debug",
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
    const h = new Harness(dataDir, port, proc, exited);
    process.once("exit", h.#onExit);
    process.once("SIGINT", h.#onSignal);
    process.once("SIGTERM", h.#onSignal);
    const keep = (b: Buffer) => {
      h.#log.push(b.toString("utf8"));
      if (h.#log.length > 4000) h.#log.splice(0, 1000);
    };
    proc.stdout!.on("data", keep);
    proc.stderr!.on("data", keep);
    let dead = false;
    void exited.then(() => (dead = true));
    try {
      const deadline = Date.now() + 60_000;
      for (;;) {
        if (dead) throw new Error("zeishd exited at start");
        try {
          const res = await fetch(`http://127.0.0.1:${port}/healthz`);
          if (res.ok) break;
        } catch {
          // not listening yet
        }
        if (Date.now() > deadline) throw new Error("zeishd did not answer /healthz within 60s");
        await new Promise((r) => setTimeout(r, 100));
      }
      const key = readFileSync(join(dataDir, "admin.key"), "utf8").trim();
      (h as { apiKey: string }).apiKey = key;
      (h as { zeish: Zeish }).zeish = new Zeish({ apiUrl: h.apiUrl, apiKey: key });
    } catch (err) {
      h.failed = true;
      await h.stop();
      throw err;
    }
    return h;
  }

  /** The server's log so far (its last part). */
  log(max = 8000): string {
    const s = this.#log.join("");
    return s.length > max ? "…" + s.slice(-max) : s;
  }

  /** Environment for a child process (an example program) to reach this server. */
  clientEnv(): NodeJS.ProcessEnv {
    return { ...process.env, ZEISH_API_URL: this.apiUrl, ZEISH_API_KEY: this.apiKey };
  }

  async #deleteAll(): Promise<void> {
    if (!this.zeish) return;
    let list;
    try {
      list = await this.zeish.listSandboxes();
    } catch (err) {
      console.error("harness: listing sandboxes:", err);
      return;
    }
    await Promise.all(list.map(async (sb) => {
      this.#seen.add(sb.id);
      try {
        if (sb.state !== "deleting") await this.zeish.deleteSandbox(sb.id);
        await this.zeish.waitSandbox(sb.id, undefined, { timeoutSeconds: 120 });
      } catch (err) {
        console.error(`harness: deleting ${sb.id}:`, err);
      }
    }));
  }

  /** Deletes every sandbox, stops zeishd, cleans up after it. Safe to call twice. */
  async stop(): Promise<void> {
    const proc = this.#proc;
    if (proc) {
      await this.#deleteAll();
      if (this.failed) console.error(`zeishd log:\n${this.log()}`);
      proc.kill("SIGTERM");
      const timer = new Promise<"timeout">((r) => setTimeout(() => r("timeout"), 30_000).unref());
      if ((await Promise.race([this.#exited, timer])) === "timeout") {
        console.error("harness: zeishd did not exit within 30s of SIGTERM; killing it");
        proc.kill("SIGKILL");
        await this.#exited;
      }
      this.#proc = undefined;
    }
    this.#sweep();
    process.removeListener("exit", this.#onExit);
    process.removeListener("SIGINT", this.#onSignal);
    process.removeListener("SIGTERM", this.#onSignal);
  }

  /** Kills VM processes of this data dir, removes their RAM files and the data dir. */
  #sweep(): void {
    const left = processesUnder(this.dataDir);
    if (left.length > 0) {
      console.error(`harness: VM processes left behind: ${left.join(", ")}; killing them`);
      for (const pid of left) {
        try { process.kill(pid, "SIGKILL"); } catch { /* gone */ }
      }
    }
    // Guest-RAM files: zeish-<sbx id>-*.mem and zeish-img-<img id>.mem.
    const ids = new Set(this.#seen);
    for (const sub of ["sandboxes", "images"]) {
      try {
        for (const e of readdirSync(join(this.dataDir, sub))) ids.add(e);
      } catch {
        // none
      }
    }
    let shm: string[] = [];
    try {
      shm = readdirSync("/dev/shm");
    } catch {
      // no /dev/shm
    }
    const stray = shm.filter((f) => [...ids].some((id) => f.startsWith(`zeish-${id}-`) || f === `zeish-img-${id}.mem`));
    if (stray.length > 0) {
      console.error(`harness: RAM files left in /dev/shm: ${stray.join(", ")}; removing them`);
      for (const f of stray) rmSync(join("/dev/shm", f), { force: true });
    }
    rmSync(this.dataDir, { recursive: true, force: true });
  }

  /** Last resort when the test process exits or is signalled without stop(): nothing async works here. */
  #emergency(): void {
    try { this.#proc?.kill("SIGKILL"); } catch { /* gone */ }
    this.#proc = undefined;
    this.#sweep();
  }
}
