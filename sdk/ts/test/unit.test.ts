// The SDK's wire handling against a tiny in-process fake server (no zeishd,
// no VM): NDJSON exec streams split anywhere, token caching and renewal,
// error envelopes, streamed uploads.
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { ConflictError, RateLimitError, Sandbox, Zeish, ZeishError, isZeishError } from "../src/index.js";

const ID = "sbx_aaaaaaaaaaaaaaaaaaaa";
let server: Server;
let base: string;
let accessCalls = 0;
let ttlMs = 15 * 60_000;
let expireNext = false;
const uploads: { path: string; mode: string | null; body: string; auth: string | undefined }[] = [];

function sandboxJSON(state = "running") {
  return {
    id: ID, name: "fake", account_id: "acc_admin", state, template: "base", vcpus: 1, memory_mib: 256, disk_mib: 2048,
    region: "local", host: "node-x", hostname: "fake", address: "10.0.0.2", env: {}, browser: false, desktop: false,
    metadata: {}, cost_micros: 0, created_at: new Date().toISOString(), updated_at: new Date().toISOString(),
  };
}

function sendJSON(res: ServerResponse, status: number, v: unknown, headers: Record<string, string> = {}) {
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify(v));
}

async function body(req: IncomingMessage): Promise<string> {
  let s = "";
  for await (const c of req) s += c;
  return s;
}

async function handle(req: IncomingMessage, res: ServerResponse) {
  const url = new URL(req.url!, base);
  const p = url.pathname;
  if (p === `/api/v1/public/sandboxes/${ID}` && req.method === "GET") return sendJSON(res, 200, sandboxJSON());
  if (p === `/api/v1/public/sandboxes/${ID}/access`) {
    accessCalls++;
    return sendJSON(res, 200, {
      url: `${base}/data/v1/sandboxes/${ID}`, token: `zdp_${accessCalls}`, expires_at: new Date(Date.now() + ttlMs).toISOString(),
    });
  }
  if (p === "/api/v1/public/sandboxes" && req.method === "POST") {
    return sendJSON(res, 429, { error: { code: "rate_limited", message: "slow down" } }, { "retry-after": "7" });
  }
  if (p === `/api/v1/public/sandboxes/${ID}/clone`) return sendJSON(res, 409, { error: { code: "node_full", message: "no memory" } });
  if (p.startsWith(`/data/v1/sandboxes/${ID}/`)) {
    if (expireNext) {
      expireNext = false;
      return sendJSON(res, 401, { error: { code: "token_expired", message: "expired" } });
    }
    if (p.endsWith("/exec")) {
      const req0 = JSON.parse(await body(req)) as { argv: string[]; stdin?: string };
      res.writeHead(200, { "content-type": "application/x-ndjson" });
      // "héllo\n" as stdout split inside the UTF-8 of é, events split across writes.
      const e = new TextEncoder().encode("héllo\n");
      const lines = [
        JSON.stringify({ type: "stdout", data: Buffer.from(e.subarray(0, 2)).toString("base64") }),
        JSON.stringify({ type: "stderr", data: Buffer.from("warn\n").toString("base64") }),
        JSON.stringify({ type: "stdout", data: Buffer.from(e.subarray(2)).toString("base64") }),
        JSON.stringify({ type: "stdout", data: Buffer.from(`argv=${req0.argv.join(" ")} stdin=${Buffer.from(req0.stdin ?? "", "base64")}`).toString("base64") }),
        JSON.stringify({ type: "future-kind", data: "" }),
        JSON.stringify({ type: "exit", result: { exit_code: 2, timed_out: false, pid: 42, duration_ms: 5 } }),
      ].join("\n") + "\n";
      for (let i = 0; i < lines.length; i += 7) {
        res.write(lines.slice(i, i + 7));
        await new Promise((r) => setTimeout(r, 1));
      }
      return res.end();
    }
    if (p.endsWith("/files") && req.method === "PUT") {
      uploads.push({ path: url.searchParams.get("path")!, mode: url.searchParams.get("mode"), body: await body(req), auth: req.headers.authorization });
      const last = uploads.at(-1)!;
      return sendJSON(res, 200, { name: "f", path: last.path, size: last.body.length, mode: "-rw-r--r--", perm: 420, is_dir: false, mod_time: new Date().toISOString() });
    }
    return sendJSON(res, 404, { error: { code: "file_not_found", message: "no such file" } });
  }
  sendJSON(res, 502, "bad gateway, not an envelope");
}

before(async () => {
  server = createServer((req, res) => void handle(req, res));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(() => new Promise<void>((r) => server.close(() => r())));

const zeish = () => new Zeish({ apiUrl: `${base}/api/v1`, apiKey: "zk_test" });

test("exec parses a chunked NDJSON stream as it arrives", async () => {
  const sbx = await Sandbox.connect(ID, { zeish: zeish() });
  const seen: string[] = [];
  const r = await sbx.exec(["echo", "x"], { stdin: "in", onStdout: (c) => seen.push(c) });
  assert.equal(r.exitCode, 2);
  assert.equal(r.stdout, "héllo\nargv=echo x stdin=in");
  assert.equal(r.stderr, "warn\n");
  assert.equal(seen.join(""), r.stdout);
  assert.deepEqual([r.pid, r.timedOut, r.signal], [42, false, undefined]);
});

test("data-plane tokens are cached, renewed near expiry and after token_expired", async () => {
  const sbx = await Sandbox.connect(ID, { zeish: zeish() });
  const start = accessCalls;
  await sbx.exec("true");
  await sbx.exec("true");
  assert.equal(accessCalls - start, 1, "token reused");
  expireNext = true;
  await sbx.files.write("/root/a", "abc", { mode: 0o755 });
  assert.equal(accessCalls - start, 2, "renewed after token_expired");
  assert.deepEqual(uploads.at(-1), { path: "/root/a", mode: "0755", body: "abc", auth: `Bearer zdp_${accessCalls}` });
  ttlMs = 1000; // a short-lived token is renewed before each use once within its last quarter
  const s2 = await Sandbox.connect(ID, { zeish: zeish() });
  await s2.exec("true");
  const n = accessCalls;
  await new Promise((r) => setTimeout(r, 800));
  await s2.exec("true");
  assert.equal(accessCalls, n + 1);
  ttlMs = 15 * 60_000;
});

test("streamed uploads are not replayed", async () => {
  const sbx = await Sandbox.connect(ID, { zeish: zeish() });
  async function* gen() {
    yield new TextEncoder().encode("part1-");
    yield new TextEncoder().encode("part2");
  }
  await sbx.files.write("/root/s", gen());
  assert.equal(uploads.at(-1)!.body, "part1-part2");
  expireNext = true;
  await assert.rejects(sbx.files.write("/root/s", gen()), (e: unknown) => isZeishError(e, "token_expired"));
});

test("error envelopes become typed errors", async () => {
  const z = zeish();
  await assert.rejects(z.createSandbox({}), (e: unknown) => {
    assert.ok(e instanceof RateLimitError && e.code === "rate_limited" && e.status === 429 && e.retryAfter === 7);
    return true;
  });
  const sbx = await Sandbox.connect(ID, { zeish: z });
  await assert.rejects(sbx.clone({ count: 2 }), (e: unknown) => e instanceof ConflictError && e.code === "node_full" && e.message === "no memory");
  await assert.rejects(sbx.files.read("/nope"), (e: unknown) => isZeishError(e, "file_not_found"));
  await assert.rejects(z.lineage(ID), (e: unknown) => e instanceof ZeishError && e.status === 502 && e.code === "internal");
});
