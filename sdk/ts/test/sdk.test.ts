// The TypeScript SDK against a real zeishd and real VMs: one sandbox boot and
// one clone, plus error mapping that needs no VM.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  AuthenticationError, ConflictError, InvalidArgumentError, NotFoundError, Sandbox, ServerError, Zeish, ZeishError,
  isZeishError,
} from "../src/index.js";
import { Harness, vmSkipReason } from "./harness.js";

const skip = vmSkipReason();

describe("sdk against zeishd", { skip, timeout: 20 * 60_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await Harness.start();
  });
  after(async () => {
    await h?.stop();
  });

  /** Runs fn, marking the harness failed (so it prints zeishd's log) if fn throws. */
  async function tracked(fn: () => Promise<void>): Promise<void> {
    try {
      await fn();
    } catch (err) {
      if (h) h.failed = true;
      throw err;
    }
  }

  test("errors map to ZeishError codes (no VM)", () => tracked(async () => {
    const zeish = h.zeish;
    assert.equal((await zeish.health()).status, "ok");

    await assert.rejects(Sandbox.connect("sbx_00000000000000000000", { zeish }), (e: unknown) => {
      assert.ok(e instanceof NotFoundError, String(e));
      assert.equal(e.code, "not_found");
      assert.equal(e.status, 404);
      assert.ok(e.message.length > 0);
      return true;
    });
    await assert.rejects(zeish.getSandbox("not-an-id"), (e: unknown) => {
      assert.ok(isZeishError(e, "invalid_argument"), String(e));
      assert.ok(e instanceof InvalidArgumentError);
      assert.equal(e.status, 400);
      return true;
    });
    await assert.rejects(Sandbox.create({ memoryMib: 99999999 }, { zeish }), (e: unknown) => {
      assert.ok(e instanceof InvalidArgumentError && e.code === "invalid_argument", String(e));
      return true;
    });
    await assert.rejects(Sandbox.create({ name: "Not A Hostname!" }, { zeish }), InvalidArgumentError);
    await assert.rejects(zeish.deleteSnapshot("snp_00000000000000000000"), NotFoundError);
    await assert.rejects(new Zeish({ apiUrl: h.apiUrl, apiKey: "zk_wrong" }).listSandboxes(), (e: unknown) => {
      assert.ok(e instanceof AuthenticationError && e.code === "unauthenticated" && e.status === 401, String(e));
      return true;
    });
    await assert.rejects(new Zeish({ apiUrl: "http://127.0.0.1:1/api/v1", apiKey: "x" }).listSandboxes(), (e: unknown) => {
      assert.ok(e instanceof ServerError && e.code === "unavailable" && e.status === 0, String(e));
      return true;
    });
    assert.deepEqual(await zeish.listSandboxes(), []);
  }));

  test("create, exec, files, snapshot, clone, delete (real VMs)", () => tracked(async () => {
    const zeish = h.zeish;
    const t0 = Date.now();
    const sbx = await Sandbox.create({ name: "ts-sdk", memoryMib: 256, env: { GREETING: "hello" } }, { zeish });
    console.log(`create: ${Date.now() - t0} ms`);
    assert.equal(sbx.state, "running");
    assert.match(sbx.id, /^sbx_[0-9a-z]{20}$/);
    assert.equal(sbx.name, "ts-sdk");
    assert.equal(sbx.info.memory_mib, 256);
    assert.deepEqual((await Sandbox.connect(sbx.id, { zeish })).info.id, sbx.id);

    // exec: exit code, stdout and stderr apart, streamed callbacks, env, cwd, stdin.
    const chunks: string[] = [];
    const r = await sbx.exec("echo out-$GREETING-$EXTRA; echo oops >&2; exit 3", {
      env: { EXTRA: "x" }, onStdout: (c) => chunks.push(c),
    });
    assert.equal(r.exitCode, 3);
    assert.equal(r.stdout, "out-hello-x\n");
    assert.equal(r.stderr, "oops\n");
    assert.equal(r.timedOut, false);
    assert.equal(chunks.join(""), "out-hello-x\n");
    const cat = await sbx.exec(["cat"], { stdin: "piped\ninput" });
    assert.deepEqual([cat.exitCode, cat.stdout], [0, "piped\ninput"]);
    assert.equal((await sbx.exec(["pwd"], { cwd: "/root" })).stdout, "/root\n");
    const slow = await sbx.exec(["sleep", "30"], { timeoutSeconds: 1 });
    assert.equal(slow.timedOut, true);
    await assert.rejects(sbx.exec(["/no/such/binary"]), (e: unknown) => isZeishError(e, "file_not_found"));

    // files: binary round trip, streamed upload, list, stat, mkdir, remove.
    const blob = new Uint8Array(256 * 1024 + 7);
    for (let i = 0; i < blob.length; i++) blob[i] = (i * 7 + (i >> 8)) & 0xff;
    await sbx.files.mkdir("/root/data/deep", { parents: true });
    const fi = await sbx.files.write("/root/data/blob.bin", blob, { mode: 0o600 });
    assert.equal(fi.size, blob.length);
    assert.equal(fi.perm, 0o600);
    const back = await sbx.files.read("/root/data/blob.bin", { format: "bytes" });
    assert.equal(back.length, blob.length);
    assert.ok(Buffer.from(back).equals(Buffer.from(blob)), "binary round trip differs");
    async function* parts() {
      yield new TextEncoder().encode("streamed ");
      yield new TextEncoder().encode("upload\n");
    }
    await sbx.files.write("/root/data/streamed.txt", parts());
    assert.equal(await sbx.files.read("/root/data/streamed.txt"), "streamed upload\n");
    const names = (await sbx.files.list("/root/data")).map((f) => f.name).sort();
    assert.deepEqual(names, ["blob.bin", "deep", "streamed.txt"]);
    assert.equal((await sbx.files.stat("/root/data/deep")).is_dir, true);
    await sbx.files.remove("/root/data/deep");
    assert.equal(await sbx.files.exists("/root/data/deep"), false);
    await assert.rejects(sbx.files.read("/root/missing"), (e: unknown) => e instanceof NotFoundError && e.code === "file_not_found");
    await assert.rejects(sbx.files.mkdir("/root/data"), (e: unknown) => isZeishError(e, "file_exists"));

    // snapshots
    await sbx.files.write("/root/marker.txt", "from-parent\n");
    const snap = await sbx.snapshots.create({ name: "warm" });
    assert.match(snap.id, /^snp_/);
    assert.equal(snap.info.sandbox_id, sbx.id);
    assert.deepEqual((await sbx.snapshots.list()).map((s) => s.name), ["warm"]);
    await assert.rejects(sbx.snapshots.create({ name: "warm" }), (e: unknown) => e instanceof ConflictError && e.code === "name_taken");

    // clone: the child continues from the parent's state, on its own.
    const t1 = Date.now();
    const { pauseMs, sandboxes } = await sbx.clone({ count: 1, gitBranch: "try-1" });
    console.log(`clone: ${Date.now() - t1} ms (parent paused ${pauseMs} ms)`);
    assert.equal(sandboxes.length, 1);
    const child = sandboxes[0]!;
    assert.equal(child.state, "running");
    assert.notEqual(child.id, sbx.id);
    assert.equal(child.info.parent_id, sbx.id);
    assert.equal(child.info.git_branch, "try-1");
    assert.ok(pauseMs >= 0);
    assert.equal((await child.exec(["cat", "/root/marker.txt"])).stdout, "from-parent\n");
    assert.ok(Buffer.from(await child.files.readBytes("/root/data/blob.bin")).equals(Buffer.from(blob)));
    await child.files.write("/root/child-only.txt", "mine");
    assert.equal(await sbx.files.exists("/root/child-only.txt"), false);
    const lineage = await sbx.lineage();
    assert.deepEqual(lineage.descendants.map((d) => d.id), [child.id]);
    assert.equal((await child.delete()).state, "destroyed");
    assert.equal((await sbx.exec("echo still-here")).stdout, "still-here\n");

    // pause / resume
    assert.equal((await sbx.pause()).state, "paused");
    await assert.rejects(sbx.exec("true"), (e: unknown) => e instanceof ZeishError && e.code === "invalid_state");
    assert.equal((await sbx.resume()).state, "running");

    await snap.delete();
    assert.deepEqual(await sbx.snapshots.list(), []);
    assert.equal((await sbx.delete()).state, "destroyed");
    await assert.rejects(sbx.exec("true"), ZeishError);
    console.log(`vm test total: ${Date.now() - t0} ms`);
  }));
});
