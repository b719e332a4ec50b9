// A real zeishd for the E2B compatibility tests: bin/zeishd (from `make
// build`) on a temp data dir, with the template cache the Go tests fill.
// opts() points the unmodified `e2b` SDK at it. As root, zeishd runs in a
// network namespace of the test's own (a veth to a second, empty one is its
// uplink), so its guests have real networking (ports, getHost) while nothing
// touches the host's network; the test reaches it through a loopback port
// relayed over a Unix socket. stop() deletes every sandbox, stops zeishd,
// kills any VM process it left and removes the namespaces and the temp dir;
// an exit hook does the same if the test process dies.
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { get as httpGet } from "node:http";
import { createRequire } from "node:module";
import { connect, createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** The e2b SDKs the suite runs: the package aliases of package.json ("e2b-2-45": "npm:e2b@2.45.0"), oldest first. */
export function sdkPackages() {
  const pkg = JSON.parse(readFileSync(join(dirname(fileURLToPath(import.meta.url)), "..", "package.json"), "utf8"));
  const names = Object.keys(pkg.dependencies).filter((n) => /^e2b-\d+-\d+$/.test(n));
  const version = (n) => pkg.dependencies[n].replace(/^npm:e2b@/, "");
  return names.map((name) => ({ name, version: version(name) })).sort((a, b) => cmpVersions(a.version, b.version));
}

function cmpVersions(a, b) {
  const pa = a.split(".").map(Number);
  const pb = b.split(".").map(Number);
  for (let i = 0; i < 3; i++) if (pa[i] !== pb[i]) return pa[i] - pb[i];
  return 0;
}

/** The SDK a run tests (E2B_SDK names its alias; the newest by default): its module, its version, and how it compares. */
export async function sdk() {
  const all = sdkPackages();
  const name = process.env.E2B_SDK || all.at(-1).name;
  const require = createRequire(import.meta.url);
  const version = JSON.parse(readFileSync(join(dirname(require.resolve(name)), "..", "package.json"), "utf8")).version;
  return {
    module: await import(name), name, version,
    atLeast: (v) => cmpVersions(version, v) >= 0,
    newest: cmpVersions(version, all.at(-1).version) >= 0,
  };
}

/** A zeish key's E2B form (e2b_ and the hex of its bytes; api.E2BKey): E2B's SDKs before 2.46 accept no other. */
export function e2bKey(zeishKey) {
  return "e2b_" + Buffer.from(zeishKey.replace(/^zk_/, ""), "base64url").toString("hex");
}

export function repoRoot() {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "go.mod"))) {
    const up = dirname(dir);
    if (up === dir) throw new Error("zeish repo root (go.mod) not found");
    dir = up;
  }
  return dir;
}

/** Why VM tests cannot run here, or undefined. Under CI a missing QEMU is an error, never a skip. */
export function vmSkipReason() {
  const missing = ["qemu-system-x86_64", "qemu-img"].filter((t) => spawnSync("sh", ["-c", `command -v ${t}`]).status !== 0);
  if (missing.length === 0) return undefined;
  const msg = `${missing.join(", ")} not found`;
  if (process.env.CI) throw new Error(`CI is set, refusing to skip VM tests: ${msg}`);
  return msg;
}

async function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const port = srv.address().port;
      srv.close(() => resolve(port));
    });
  });
}

function processesUnder(dir) {
  const pids = [];
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

/** The E2B domain zeishd is told (ZEISH_E2B_DOMAIN): getHost names hosts under it. */
export const e2bDomain = "e2b.test";

function ip(...args) {
  const r = spawnSync("ip", args, { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`ip ${args.join(" ")}: ${r.stderr || r.error}`);
}

/** Two network namespaces joined by a veth pair (198.18.0.0/15 addresses):
 * zeishd's, whose only route leads to the other, empty one. */
function makeLab() {
  const id = randomBytes(3).toString("hex");
  const lab = { node: `ze2b-${id}-n`, inet: `ze2b-${id}-i`, uplink: `ze2v${id}n` };
  const peer = `ze2v${id}i`;
  lab.close = () => {
    // Deleting a namespace deletes the veth pair with it.
    for (const ns of [lab.node, lab.inet]) spawnSync("ip", ["netns", "del", ns]);
  };
  try {
    for (const step of [
      ["netns", "add", lab.node],
      ["netns", "add", lab.inet],
      ["link", "add", lab.uplink, "netns", lab.node, "type", "veth", "peer", "name", peer, "netns", lab.inet],
      ["-n", lab.node, "link", "set", "lo", "up"],
      ["-n", lab.inet, "link", "set", "lo", "up"],
      ["-n", lab.node, "addr", "add", "198.18.0.2/24", "dev", lab.uplink],
      ["-n", lab.inet, "addr", "add", "198.18.0.1/24", "dev", peer],
      ["-n", lab.node, "link", "set", lab.uplink, "up"],
      ["-n", lab.inet, "link", "set", peer, "up"],
      ["-n", lab.node, "route", "add", "default", "via", "198.18.0.1"],
    ]) ip(...step);
  } catch (err) {
    lab.close();
    throw err;
  }
  return lab;
}

export class Harness {
  failed = false;
  #proc;
  #exited;
  #relayProc;
  #relayServer;
  #log = [];
  #onExit = () => this.#emergency();

  static async start() {
    const h = new Harness();
    const root = repoRoot();
    const zeishd = join(root, "bin", "zeishd");
    const sandboxd = join(root, "bin", "sandboxd");
    for (const b of [zeishd, sandboxd]) {
      if (!existsSync(b)) throw new Error(`${b} is missing: run \`make build\` first`);
    }
    h.dataDir = mkdtempSync(join(tmpdir(), "zeish-e2b-test-"));
    const env = {
      ...process.env,
      ZEISH_DATA_DIR: h.dataDir,
      ZEISH_SANDBOXD: sandboxd,
      ZEISH_TEMPLATE_CACHE: join(process.env.ZEISH_TEST_CACHE || "/var/tmp/zeish-test-cache", "templates"),
      ZEISH_LOG_LEVEL: "debug",
      ZEISH_E2B_DOMAIN: e2bDomain,
      // The debian template (bash, E2B's `user`) from the cache the Go
      // tests fill (`make test-e2b` runs template TestBuildDebian first);
      // zeishd cannot build it in its namespace.
      ZEISH_DEBIAN_TEMPLATE: "on",
    };
    if (process.geteuid() === 0) {
      h.lab = makeLab();
      const inside = "127.0.0.1:7420";
      // Clients reach it through the relay's port on the host's loopback:
      // data-plane URLs must name that, not zeishd's own address.
      h.port = await freePort();
      h.#proc = spawn("nsenter", [`--net=/run/netns/${h.lab.node}`, zeishd], {
        env: { ...env, ZEISH_LISTEN: inside, ZEISH_NET: "on", ZEISH_UPLINK: h.lab.uplink, ZEISH_DNS_UPSTREAM: "198.18.0.1:53",
          ZEISH_PUBLIC_URL: `http://127.0.0.1:${h.port}` },
        stdio: ["ignore", "pipe", "pipe"],
      });
    } else {
      h.port = await freePort();
      h.#proc = spawn(zeishd, [], { env: { ...env, ZEISH_LISTEN: `127.0.0.1:${h.port}`, ZEISH_NET: "off" }, stdio: ["ignore", "pipe", "pipe"] });
    }
    h.#exited = new Promise((resolve) => h.#proc.once("exit", () => resolve()));
    process.once("exit", h.#onExit);
    const keep = (b) => {
      h.#log.push(b.toString("utf8"));
      if (h.#log.length > 4000) h.#log.splice(0, 1000);
    };
    h.#proc.stdout.on("data", keep);
    h.#proc.stderr.on("data", keep);
    let dead = false;
    void h.#exited.then(() => (dead = true));
    try {
      if (h.lab) await h.#relay("127.0.0.1:7420");
      h.base = `http://127.0.0.1:${h.port}`;
      const deadline = Date.now() + 60_000;
      for (;;) {
        if (dead) throw new Error("zeishd exited at start");
        try {
          // A bound per try: a connection stuck in the relay must not hang the start.
          if ((await fetch(`${h.base}/healthz`, { signal: AbortSignal.timeout(5_000) })).ok) break;
        } catch {
          // not listening yet
        }
        if (Date.now() > deadline) throw new Error("zeishd did not answer /healthz within 60s");
        await new Promise((r) => setTimeout(r, 100));
      }
      h.apiKey = readFileSync(join(h.dataDir, "admin.key"), "utf8").trim();
      h.e2bKey = e2bKey(h.apiKey);
    } catch (err) {
      h.failed = true;
      await h.stop();
      throw err;
    }
    return h;
  }

  /** promise, or an error naming what after ms: a hang fails the test (and prints zeishd's log at stop) instead of sitting until CI's limit. */
  async within(ms, what, promise) {
    let timer;
    const late = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms / 1000}s`)), ms);
    });
    try {
      return await Promise.race([promise, late]);
    } catch (err) {
      this.failed = true;
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Whether guests have a managed network (ports, getHost): zeishd runs in the test's own namespaces. */
  get networked() {
    return this.lab !== undefined;
  }

  // #relay serves zeishd's address inside the namespace on a loopback port
  // of the host: a relay process in the namespace listens on a Unix socket.
  async #relay(inside) {
    const sock = join(this.dataDir, "relay.sock");
    this.#relayProc = spawn("nsenter", [`--net=/run/netns/${this.lab.node}`, process.execPath,
      join(dirname(fileURLToPath(import.meta.url)), "relay.mjs"), sock, inside], { stdio: ["ignore", "pipe", "inherit"] });
    await new Promise((resolve, reject) => {
      this.#relayProc.once("exit", (code) => reject(new Error(`relay exited (${code})`)));
      this.#relayProc.stdout.once("data", () => resolve());
    });
    this.#relayServer = createServer((c) => {
      const up = connect(sock);
      c.pipe(up);
      up.pipe(c);
      c.on("error", () => up.destroy());
      up.on("error", () => c.destroy());
    });
    await new Promise((resolve) => this.#relayServer.listen(this.port, "127.0.0.1", resolve));
    this.port = this.#relayServer.address().port;
  }

  /** The SDK's connection options for this server (what E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY would say). */
  opts(extra = {}) {
    // Boots under TCG on a shared machine can outlast the SDK's default 60 s request timeout.
    return { apiUrl: `${this.base}/e2b`, sandboxUrl: `${this.base}/e2b/envd`, apiKey: this.e2bKey, requestTimeoutMs: 600_000, ...extra };
  }

  /** GET path of a host name under e2bDomain (getHost's), sent to zeishd as a TLS proxy with a wildcard name would. */
  hostGet(host, path, headers = {}) {
    const lookup = (_name, opts, cb) => (opts?.all ? cb(null, [{ address: "127.0.0.1", family: 4 }]) : cb(null, "127.0.0.1", 4));
    return new Promise((resolve, reject) => {
      httpGet({ host, port: this.port, path, headers, lookup }, (res) => {
        let body = "";
        res.on("data", (d) => (body += d));
        res.on("end", () => resolve({ status: res.statusCode, body }));
      }).on("error", reject);
    });
  }

  /** A call to zeish's own API, for what the E2B SDK cannot see. */
  async zeish(method, path, body) {
    const res = await fetch(`${this.base}/api/v1/public${path}`, {
      method,
      headers: { Authorization: `Bearer ${this.apiKey}`, "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  }

  log(max = 8000) {
    const s = this.#log.join("");
    return s.length > max ? "…" + s.slice(-max) : s;
  }

  async #deleteAll() {
    let list;
    try {
      list = (await this.zeish("GET", "/sandboxes")).body.sandboxes;
    } catch (err) {
      console.error("harness: listing sandboxes:", err);
      return;
    }
    await Promise.all(list.map(async (sb) => {
      try {
        if (sb.state !== "deleting") await this.zeish("DELETE", `/sandboxes/${sb.id}`);
        await this.zeish("POST", `/sandboxes/${sb.id}/wait`, { timeout_seconds: 120 });
      } catch (err) {
        console.error(`harness: deleting ${sb.id}:`, err);
      }
    }));
  }

  /** Deletes every sandbox, stops zeishd, cleans up after it. Safe to call twice. */
  async stop() {
    const proc = this.#proc;
    if (proc) {
      if (this.apiKey) await this.#deleteAll();
      if (this.failed) console.error(`zeishd log:\n${this.log()}`);
      proc.kill("SIGTERM");
      const timer = new Promise((r) => setTimeout(() => r("timeout"), 30_000).unref());
      if ((await Promise.race([this.#exited, timer])) === "timeout") {
        console.error("harness: zeishd did not exit within 30s of SIGTERM; killing it");
        proc.kill("SIGKILL");
        await this.#exited;
      }
      this.#proc = undefined;
    }
    this.#sweep();
    process.removeListener("exit", this.#onExit);
  }

  #closeRelay() {
    this.#relayServer?.close();
    this.#relayServer = undefined;
    try { this.#relayProc?.kill("SIGKILL"); } catch { /* gone */ }
    this.#relayProc = undefined;
  }

  #sweep() {
    this.#closeRelay();
    if (!this.dataDir) return;
    const left = processesUnder(this.dataDir);
    if (left.length > 0) {
      console.error(`harness: VM processes left behind: ${left.join(", ")}; killing them`);
      for (const pid of left) {
        try { process.kill(pid, "SIGKILL"); } catch { /* gone */ }
      }
    }
    this.lab?.close();
    this.lab = undefined;
    const ids = new Set();
    for (const sub of ["sandboxes", "images"]) {
      try {
        for (const e of readdirSync(join(this.dataDir, sub))) ids.add(e);
      } catch {
        // none
      }
    }
    let shm = [];
    try { shm = readdirSync("/dev/shm"); } catch { /* none */ }
    for (const f of shm.filter((f) => [...ids].some((id) => f.startsWith(`zeish-${id}-`) || f === `zeish-img-${id}.mem`))) {
      console.error(`harness: RAM file left in /dev/shm: ${f}; removing it`);
      rmSync(join("/dev/shm", f), { force: true });
    }
    rmSync(this.dataDir, { recursive: true, force: true });
  }

  #emergency() {
    try { this.#proc?.kill("SIGKILL"); } catch { /* gone */ }
    this.#proc = undefined;
    this.#sweep();
  }
}
