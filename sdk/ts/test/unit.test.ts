// The SDK's wire handling against a tiny in-process fake server (no zeishd,
// no VM): NDJSON exec streams split anywhere, token caching and renewal,
// error envelopes, streamed uploads.
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import {
  AuthenticationError, ConflictError, InvalidArgumentError, RateLimitError, Sandbox, ServerError, Zeish, ZeishError, isZeishError,
  type PriceEstimate, type UsageReport,
} from "../src/index.js";

const ID = "sbx_aaaaaaaaaaaaaaaaaaaa";
let server: Server;
let base: string;
let accessCalls = 0;
let ttlMs = 15 * 60_000;
let expireNext = false;
const uploads: { path: string; mode: string | null; body: string; auth: string | undefined }[] = [];
/** Control-plane requests to the admin, usage and pricing routes, as the fake server saw them. */
const seen: { method: string; path: string; query: Record<string, string>; body: string; auth: string | undefined; type: string | undefined }[] = [];
const KEY_ID = "key_bbbbbbbbbbbbbbbbbbbb";
const T0 = "2026-01-02T03:04:05Z";
const PRICES = { vcpu_second_micros: 14, memory_gib_second_micros: 4.5, disk_gib_second_micros: 0.04 };
const USAGE = {
  running_seconds: 60, vcpu_seconds: 60, memory_gib_seconds: 30, disk_gib_seconds: 120, compute_micros: 975,
  storage_micros: 5, cost_micros: 980,
};

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
  if (p.startsWith("/api/v1/public/templates")) return templateRoute(req, res, p);
  if (p.startsWith("/api/v1/admin/") || p === "/api/v1/public/usage" || p === "/api/v1/public/pricing/estimate" || p.endsWith("/fork") || p.endsWith("/network") || p.endsWith("/ports")) {
    const rec = {
      method: req.method!, path: p, query: Object.fromEntries(url.searchParams), body: await body(req),
      auth: req.headers.authorization, type: req.headers["content-type"],
    };
    seen.push(rec);
    if (p.startsWith("/api/v1/admin/") && rec.auth !== "Bearer zk_test") {
      return sendJSON(res, 403, { error: { code: "forbidden", message: "only an admin account may use " + p } });
    }
    const m = `${req.method} ${p}`;
    if (m === "POST /api/v1/admin/accounts") {
      const name = (JSON.parse(rec.body) as { name: string }).name;
      if (name === "taken") return sendJSON(res, 409, { error: { code: "name_taken", message: "an account is named taken" } });
      return sendJSON(res, 201, { id: "acc_team", name, admin: false, created_at: T0 });
    }
    if (m === "GET /api/v1/admin/accounts") {
      return sendJSON(res, 200, { accounts: [{ id: "acc_admin", name: "admin", admin: true, created_at: T0 }, { id: "acc_team", name: "team-a", admin: false, created_at: T0 }] });
    }
    if (m === "POST /api/v1/admin/accounts/acc_team/keys") {
      return sendJSON(res, 201, { id: KEY_ID, account_id: "acc_team", key: "zk_secret", prefix: "zk_secre", created_at: T0 });
    }
    if (m === "GET /api/v1/admin/keys") {
      return sendJSON(res, 200, { keys: [{ id: KEY_ID, account_id: "acc_team", prefix: "zk_secre", created_at: T0 }] });
    }
    if (m === `DELETE /api/v1/admin/keys/${KEY_ID}`) {
      return sendJSON(res, 200, { id: KEY_ID, account_id: "acc_team", prefix: "zk_secre", created_at: T0, revoked_at: T0 });
    }
    if (m === "GET /api/v1/public/usage") {
      return sendJSON(res, 200, {
        from: rec.query.from ?? T0, to: rec.query.to ?? T0, prices: PRICES, total: USAGE,
        sandboxes: [{ sandbox_id: ID, name: "fake", state: "destroyed", usage: USAGE }],
      });
    }
    if (m === "GET /api/v1/public/pricing/estimate") {
      if (Number(rec.query.sandboxes) > 10000) {
        return sendJSON(res, 400, { error: { code: "invalid_argument", message: "sandboxes out of range" } });
      }
      return sendJSON(res, 200, {
        sandboxes: Number(rec.query.sandboxes ?? 1), vcpus: Number(rec.query.vcpus ?? 1), memory_mib: Number(rec.query.memory_mib ?? 512),
        disk_mib: Number(rec.query.disk_mib ?? 2048), minutes: Number(rec.query.minutes ?? 60), prices: PRICES, usage: USAGE,
      });
    }
    if (m === `PATCH /api/v1/public/sandboxes/${ID}/network`) {
      const req = JSON.parse(rec.body) as { egress?: string; allow?: string[]; deny?: string[] };
      if (req.allow?.includes("1.2.3.4/33")) return sendJSON(res, 400, { error: { code: "invalid_argument", message: "bad cidr" } });
      return sendJSON(res, 200, { ...sandboxJSON(), network: { enabled: true, egress: req.egress ?? "allow", allow: req.allow ?? [], deny: req.deny ?? [] } });
    }
    if (m === `POST /api/v1/public/sandboxes/${ID}/ports`) {
      const req = JSON.parse(rec.body) as { port: number; public: boolean };
      const url = `${base}/data/v1/sandboxes/${ID}/ports/${req.port}/`;
      return sendJSON(res, 200, { port: req.port, public: req.public, url, tcp_url: url.replace("http", "ws") });
    }
    if (m === `POST /api/v1/public/sandboxes/${ID}/fork`) {
      return sendJSON(res, 429, { error: { code: "daily_cap_reached", message: "500 creates today" } });
    }
    return sendJSON(res, 404, { error: { code: "not_found", message: "no route " + m } });
  }
  if (p === `/api/v1/public/sandboxes/${ID}/start`) {
    return sendJSON(res, 409, { error: { code: "budget_exhausted", message: "max_cost_micros reached" } });
  }
  if (p === `/api/v1/public/sandboxes/${ID}/resume`) {
    return sendJSON(res, 409, { error: { code: "running_slots_full", message: "10 of 10 running slots in use" } });
  }
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
  if (p === `/api/v1/public/sandboxes/${ID}/snapshots` && req.method === "POST") {
    return sendJSON(res, 500, { error: { code: "internal", message: "an internal error occurred", request_id: "req_1" } }, { "x-request-id": "req_1" });
  }
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
  await assert.rejects(z.lineage(ID), (e: unknown) => e instanceof ZeishError && e.status === 502 && e.code === "unavailable");
  await assert.rejects(sbx.snapshots.create(), (e: unknown) => e instanceof ServerError && e.code === "internal" && e.requestId === "req_1");
});

test("admin: accounts and keys, request shapes", async () => {
  const z = zeish();
  seen.length = 0;
  const acc = await z.admin.createAccount("team-a");
  assert.deepEqual(acc, { id: "acc_team", name: "team-a", admin: false, created_at: T0 });
  assert.deepEqual((await z.admin.listAccounts()).map((a) => [a.id, a.admin]), [["acc_admin", true], ["acc_team", false]]);
  const key = await z.admin.createKey(acc.id);
  assert.equal(key.key, "zk_secret");
  assert.equal(key.account_id, "acc_team");
  assert.deepEqual((await z.admin.listKeys({ account: acc.id })).map((k) => k.id), [KEY_ID]);
  await z.admin.listKeys();
  const revoked = await z.admin.revokeKey(key.id);
  assert.equal(revoked.revoked_at, T0);
  assert.deepEqual(seen.map((r) => [r.method, r.path, r.query, r.body, r.auth]), [
    ["POST", "/api/v1/admin/accounts", {}, '{"name":"team-a"}', "Bearer zk_test"],
    ["GET", "/api/v1/admin/accounts", {}, "", "Bearer zk_test"],
    ["POST", "/api/v1/admin/accounts/acc_team/keys", {}, "{}", "Bearer zk_test"],
    ["GET", "/api/v1/admin/keys", { account: "acc_team" }, "", "Bearer zk_test"],
    ["GET", "/api/v1/admin/keys", {}, "", "Bearer zk_test"],
    ["DELETE", `/api/v1/admin/keys/${KEY_ID}`, {}, "", "Bearer zk_test"],
  ]);
  assert.equal(seen[0]!.type, "application/json");
  assert.equal(seen[2]!.type, "application/json");

  await assert.rejects(z.admin.createAccount("taken"), (e: unknown) => e instanceof ConflictError && e.code === "name_taken" && e.status === 409);
  const user = new Zeish({ apiUrl: `${base}/api/v1`, apiKey: "zk_user" });
  for (const call of [() => user.admin.listAccounts(), () => user.admin.createKey("acc_team"), () => user.admin.revokeKey(KEY_ID)]) {
    await assert.rejects(call(), (e: unknown) => {
      assert.ok(e instanceof AuthenticationError && e.code === "forbidden" && e.status === 403, String(e));
      return true;
    });
  }
});

test("usage and estimate: query parameters and typed answers", async () => {
  const z = zeish();
  seen.length = 0;
  const all: UsageReport = await z.usage();
  assert.equal(all.total.cost_micros, 980);
  assert.deepEqual(all.sandboxes.map((s) => [s.sandbox_id, s.state]), [[ID, "destroyed"]]);
  const from = new Date("2026-01-01T00:00:00Z");
  await z.usage({ from, to: "2026-01-02T00:00:00Z" });
  await z.usage({ to: new Date("2026-01-03T00:00:00.250Z") });
  assert.deepEqual(seen.map((r) => [r.method, r.path, r.query, r.body]), [
    ["GET", "/api/v1/public/usage", {}, ""],
    ["GET", "/api/v1/public/usage", { from: "2026-01-01T00:00:00.000Z", to: "2026-01-02T00:00:00Z" }, ""],
    ["GET", "/api/v1/public/usage", { to: "2026-01-03T00:00:00.250Z" }, ""],
  ]);

  seen.length = 0;
  const est: PriceEstimate = await z.estimate({ sandboxes: 10, vcpus: 2, memoryMib: 1024, diskMib: 4096, minutes: 30, size: "medium" });
  assert.deepEqual([est.sandboxes, est.vcpus, est.memory_mib, est.disk_mib, est.minutes], [10, 2, 1024, 4096, 30]);
  assert.deepEqual(est.prices, PRICES);
  await z.estimate();
  await z.estimate({ size: "large" });
  assert.deepEqual(seen.map((r) => r.query), [
    { sandboxes: "10", vcpus: "2", memory_mib: "1024", disk_mib: "4096", minutes: "30", size: "medium" },
    {},
    { size: "large" },
  ]);
  await assert.rejects(z.estimate({ sandboxes: 10001 }), (e: unknown) => e instanceof InvalidArgumentError && e.code === "invalid_argument");
});

test("quota and budget errors map to their codes", async () => {
  const z = zeish();
  await assert.rejects(z.lifecycle(ID, "start"), (e: unknown) => e instanceof ConflictError && e.code === "budget_exhausted" && e.status === 409);
  await assert.rejects(z.lifecycle(ID, "resume"), (e: unknown) => e instanceof ConflictError && e.code === "running_slots_full");
  seen.length = 0;
  await assert.rejects(z.forkSandbox(ID, { count: 2 }), (e: unknown) => {
    assert.ok(e instanceof RateLimitError && e.code === "daily_cap_reached" && e.status === 429 && e.retryAfter === undefined, String(e));
    return true;
  });
  assert.deepEqual(seen.map((r) => [r.method, r.path, r.body]), [["POST", `/api/v1/public/sandboxes/${ID}/fork`, '{"count":2}']]);
});

test("setNetwork sends a PATCH with the policy and returns the sandbox", async () => {
  const z = zeish();
  seen.length = 0;
  const sb = await z.setNetwork(ID, { egress: "deny", allow: ["pypi.org", "*.pythonhosted.org"] });
  assert.deepEqual(sb.network, { enabled: true, egress: "deny", allow: ["pypi.org", "*.pythonhosted.org"], deny: [] });
  assert.deepEqual(seen.map((r) => [r.method, r.path, r.body]), [
    ["PATCH", `/api/v1/public/sandboxes/${ID}/network`, '{"egress":"deny","allow":["pypi.org","*.pythonhosted.org"]}'],
  ]);
  await assert.rejects(z.setNetwork(ID, { allow: ["1.2.3.4/33"] }), (e: unknown) => e instanceof ZeishError && e.code === "invalid_argument");
});

const TPL = {
  id: "tpl_cccccccccccccccccccc", name: "py", account_id: "acc_admin", builtin: false, state: "building", hash: "",
  disk_mib: 1024, created_at: T0, updated_at: T0,
};
const templateRequests: { method: string; path: string; type: string | undefined; body: string }[] = [];

async function templateRoute(req: IncomingMessage, res: ServerResponse, p: string) {
  templateRequests.push({ method: req.method!, path: p, type: req.headers["content-type"], body: await body(req) });
  if (p.endsWith("/events")) {
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(`event: progress\ndata: ${JSON.stringify({ type: "progress", time: T0, progress: { step: "layer", layer: 1, layers: 2, bytes: 5, total: 10 } })}\n\n`);
    res.end(`event: state\ndata: ${JSON.stringify({ type: "state", time: T0, template: { ...TPL, state: "ready" } })}\n\n`);
    return;
  }
  if (req.method === "GET" && p === "/api/v1/public/templates") return sendJSON(res, 200, { templates: [TPL] });
  if (req.method === "POST") return sendJSON(res, 202, TPL);
  return sendJSON(res, 200, { ...TPL, state: req.method === "DELETE" ? "deleted" : "ready" });
}

test("templates: JSON and multipart builds, list, events until the build ends", async () => {
  const z = new Zeish({ apiUrl: base + "/api/v1", apiKey: "zk_test" });
  assert.equal((await z.buildTemplate({ name: "py", from: "registry:r.example/a:b" })).state, "building");
  await z.uploadTemplate({ name: "py", from: "docker-archive" }, new Blob(["ARCHIVE-BYTES"]));
  const up = templateRequests.at(-1)!;
  assert.match(up.type ?? "", /^multipart\/form-data; boundary=/);
  assert.ok(up.body.indexOf('name="spec"') < up.body.indexOf('name="image"'), "spec part comes before the image");
  assert.ok(up.body.includes("ARCHIVE-BYTES") && up.body.includes('"from":"docker-archive"'));
  assert.equal((await z.listTemplates())[0]!.name, "py");
  const steps: string[] = [];
  const t = await z.waitTemplate("py", { onEvent: (e) => steps.push(e.type) });
  assert.deepEqual(steps, ["progress", "state"]);
  assert.equal(t.state, "ready");
  assert.equal((await z.deleteTemplate("py")).state, "deleted");
});

test("setPort opens a port and says how it is reached", async () => {
  const z = zeish();
  seen.length = 0;
  const p = await z.setPort(ID, 8080, true);
  assert.equal(p.public, true);
  assert.ok(p.url.endsWith(`/data/v1/sandboxes/${ID}/ports/8080/`));
  assert.deepEqual(seen.map((r) => [r.method, r.path, r.body]), [["POST", `/api/v1/public/sandboxes/${ID}/ports`, '{"port":8080,"public":true}']]);
});
