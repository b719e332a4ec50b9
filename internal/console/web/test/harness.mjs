// A real zeishd for the browser test: bin/zeishd (built by `make build`, with
// the console embedded) on a temp data dir and a free loopback port, using
// the template cache the Go tests fill. stop() deletes every sandbox, stops
// zeishd and removes what it left.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const root = new URL("../../../../", import.meta.url).pathname;

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

export class Zeishd {
  static async start() {
    const zeishd = join(root, "bin/zeishd"), sandboxd = join(root, "bin/sandboxd");
    for (const b of [zeishd, sandboxd]) if (!existsSync(b)) throw new Error(`${b} is missing: run make build`);
    const z = new Zeishd();
    z.dataDir = mkdtempSync(join(tmpdir(), "zeish-browser-"));
    z.port = await freePort();
    z.base = `http://127.0.0.1:${z.port}`;
    z.log = [];
    z.proc = spawn(zeishd, [], {
      env: {
        ...process.env, ZEISH_DATA_DIR: z.dataDir, ZEISH_LISTEN: `127.0.0.1:${z.port}`, ZEISH_SANDBOXD: sandboxd,
        // The host's network namespace: sandboxes get no network card, so no
        // guest packet can reach a real network.
        ZEISH_NET: "off",
        ZEISH_TEMPLATE_CACHE: join(process.env.ZEISH_TEST_CACHE || "/var/tmp/zeish-test-cache", "templates"),
        ZEISH_LOG_LEVEL: "debug",
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const keep = (b) => { z.log.push(b.toString()); if (z.log.length > 3000) z.log.splice(0, 1000); };
    z.proc.stdout.on("data", keep);
    z.proc.stderr.on("data", keep);
    z.exited = new Promise((r) => z.proc.once("exit", r));
    const deadline = Date.now() + 60_000;
    for (;;) {
      try {
        if ((await fetch(z.base + "/healthz")).ok) break;
      } catch { /* not yet */ }
      if (Date.now() > deadline) throw new Error("zeishd did not start:\n" + z.log.join(""));
      await new Promise((r) => setTimeout(r, 100));
    }
    z.adminKey = readFileSync(join(z.dataDir, "admin.key"), "utf8").trim();
    return z;
  }

  /** A control-plane call with a key. */
  async api(method, path, key, body) {
    const res = await fetch(this.base + "/api/v1" + path, {
      method, headers: { Authorization: "Bearer " + key, ...(body ? { "Content-Type": "application/json" } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return text ? JSON.parse(text) : undefined;
  }

  async stop(failed) {
    try {
      const { sandboxes } = await this.api("GET", "/public/sandboxes", this.adminKey);
      await Promise.all(sandboxes.map(async (s) => {
        if (s.state !== "deleting") await this.api("DELETE", `/public/sandboxes/${s.id}`, this.adminKey).catch(() => {});
        await this.api("POST", `/public/sandboxes/${s.id}/wait`, this.adminKey, {}).catch(() => {});
      }));
    } catch (e) {
      console.error("cleanup:", e);
    }
    if (failed) console.error("zeishd log:\n" + this.log.join("").slice(-12000));
    this.proc.kill("SIGTERM");
    await Promise.race([this.exited, new Promise((r) => setTimeout(r, 30_000))]);
    this.proc.kill("SIGKILL");
    // Anything of this data dir still running is a leak: kill it and say so.
    const left = [];
    for (const e of readdirSync("/proc")) {
      if (!/^\d+$/.test(e)) continue;
      try {
        if (readFileSync(`/proc/${e}/cmdline`, "latin1").includes(this.dataDir + "/")) {
          left.push(Number(e));
          process.kill(Number(e), "SIGKILL");
        }
      } catch { /* gone */ }
    }
    rmSync(this.dataDir, { recursive: true, force: true });
    return left;
  }
}
