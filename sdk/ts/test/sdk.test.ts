// The TypeScript SDK against a real zeishd and real VMs: one sandbox boot and
// one clone, plus error mapping, accounts and keys, usage and prices (which
// reuse that sandbox and boot none of their own).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  AuthenticationError, ConflictError, InvalidArgumentError, NotFoundError, Sandbox, ServerError, Zeish, ZeishError,
  isZeishError,
} from "../src/index.js";
import type { Prices, Terminal } from "../src/index.js";
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
    // Neither an id nor a name (names are lower-case hostnames): 400.
    await assert.rejects(zeish.getSandbox("Not_A_Ref"), (e: unknown) => {
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

  /**
   * A second account and its key, while the admin's sandbox sbxId runs: the
   * key sees none of the admin's objects, may not use the admin routes, and
   * stops working once revoked.
   */
  async function accountsAndKeys(zeish: Zeish, sbxId: string): Promise<void> {
    const accounts0 = await zeish.admin.listAccounts();
    const adminAcc = accounts0.find((a) => a.admin);
    assert.ok(adminAcc, "an admin account exists");
    const acc = await zeish.admin.createAccount("ts-team");
    assert.match(acc.id, /^acc_[0-9a-z]+$/);
    assert.equal(acc.name, "ts-team");
    assert.equal(acc.admin, false);
    assert.deepEqual((await zeish.admin.listAccounts()).map((a) => a.id), [...accounts0.map((a) => a.id), acc.id]);
    await assert.rejects(zeish.admin.createAccount("ts-team"), (e: unknown) => e instanceof ConflictError && e.code === "name_taken");
    await assert.rejects(zeish.admin.createAccount("Not Valid!"), InvalidArgumentError);
    await assert.rejects(zeish.admin.createKey("acc_00000000000000000000"), (e: unknown) => e instanceof NotFoundError && e.code === "not_found");
    await assert.rejects(zeish.admin.createKey("acc_malformed"), (e: unknown) => isZeishError(e, "invalid_argument"));

    const key = await zeish.admin.createKey(acc.id);
    assert.match(key.id, /^key_[0-9a-z]{20}$/);
    assert.equal(key.account_id, acc.id);
    assert.match(key.key, /^zk_/);
    assert.ok(key.key.startsWith(key.prefix), "prefix is the key's start");
    const listed = await zeish.admin.listKeys({ account: acc.id });
    assert.deepEqual(listed.map((k) => [k.id, k.prefix, k.revoked_at]), [[key.id, key.prefix, undefined]]);
    assert.ok(!("key" in listed[0]!), "listed keys do not carry the key");
    assert.ok((await zeish.admin.listKeys()).some((k) => k.id === key.id));

    // The new key: its own empty world, no admin routes, none of the admin's sandboxes.
    const user = new Zeish({ apiUrl: h.apiUrl, apiKey: key.key });
    assert.deepEqual(await user.listSandboxes(), []);
    for (const call of [() => user.getSandbox(sbxId), () => Sandbox.connect(sbxId, { zeish: user }), () => user.access(sbxId), () => user.lineage(sbxId)]) {
      await assert.rejects(call(), (e: unknown) => {
        assert.ok(e instanceof NotFoundError && e.code === "not_found" && e.status === 404, String(e));
        return true;
      });
    }
    for (const call of [() => user.admin.listAccounts(), () => user.admin.createAccount("sneaky"), () => user.admin.createKey(acc.id),
      () => user.admin.listKeys(), () => user.admin.revokeKey(key.id)]) {
      await assert.rejects(call(), (e: unknown) => {
        assert.ok(e instanceof AuthenticationError && e.code === "forbidden" && e.status === 403, String(e));
        return true;
      });
    }
    const own = await user.usage();
    assert.deepEqual([own.sandboxes, own.total.cost_micros], [[], 0]);
    assert.equal((await user.estimate()).vcpus, 1);

    // An admin key cannot revoke itself (it would lock zeishd's admin.key out).
    const mine = (await zeish.admin.listKeys({ account: adminAcc.id })).find((k) => h.apiKey.startsWith(k.prefix));
    assert.ok(mine, "the admin key is listed");
    await assert.rejects(zeish.admin.revokeKey(mine.id), (e: unknown) => e instanceof ConflictError && e.code === "invalid_state");

    const revoked = await zeish.admin.revokeKey(key.id);
    assert.equal(revoked.id, key.id);
    assert.ok(revoked.revoked_at && !Number.isNaN(Date.parse(revoked.revoked_at)), "revoked_at set");
    assert.equal((await zeish.admin.revokeKey(key.id)).revoked_at, revoked.revoked_at, "revoking twice changes nothing");
    assert.equal((await zeish.admin.listKeys({ account: acc.id }))[0]!.revoked_at, revoked.revoked_at);
    await assert.rejects(user.listSandboxes(), (e: unknown) => {
      assert.ok(e instanceof AuthenticationError && e.code === "unauthenticated" && e.status === 401, String(e));
      return true;
    });
    await assert.rejects(user.usage(), (e: unknown) => isZeishError(e, "unauthenticated"));
    await assert.rejects(zeish.admin.revokeKey("key_00000000000000000000"), NotFoundError);
    // The admin still sees its sandbox.
    assert.equal((await zeish.getSandbox(sbxId)).state, "running");
  }

  /** Usage of the (now destroyed) sandboxes ids, and the pricing calculator. */
  async function usageAndPrices(zeish: Zeish, ids: string[]): Promise<void> {
    const all = await zeish.usage();
    for (const id of ids) {
      const row = all.sandboxes.find((s) => s.sandbox_id === id);
      assert.ok(row, `usage lists ${id}`);
      assert.equal(row.state, "destroyed");
      assert.ok(row.usage.running_seconds > 0 && row.usage.cost_micros > 0, JSON.stringify(row.usage));
    }
    assert.equal(all.total.cost_micros, all.sandboxes.reduce((n, s) => n + s.usage.cost_micros, 0), "total is the sum");
    assert.ok(Date.parse(all.from) <= Date.parse(all.to));
    // An empty window before anything existed.
    const past = await zeish.usage({ from: new Date("2020-01-01T00:00:00Z"), to: new Date("2020-01-02T00:00:00Z") });
    assert.deepEqual([past.sandboxes, past.total.cost_micros], [[], 0]);
    // A window that is the last hour: the same sandboxes.
    const hour = await zeish.usage({ from: new Date(Date.now() - 3600_000), to: new Date() });
    assert.deepEqual(hour.sandboxes.map((s) => s.sandbox_id).sort(), all.sandboxes.map((s) => s.sandbox_id).sort());
    await assert.rejects(zeish.usage({ from: "yesterday" }), InvalidArgumentError);
    await assert.rejects(zeish.usage({ from: new Date(), to: new Date(Date.now() - 3600_000) }), InvalidArgumentError);

    const est = await zeish.estimate({ sandboxes: 3, size: "medium", memoryMib: 4096, minutes: 10 });
    assert.deepEqual([est.sandboxes, est.vcpus, est.memory_mib, est.disk_mib, est.minutes], [3, 2, 4096, 8192, 10]);
    // 3 × 600 s of 2 vCPUs, 4 GiB memory and 8 GiB disk, at the prices it answers with (as zeishd rounds).
    const want = (p: Prices) => {
      const secs = 3 * 600;
      const compute = secs * 2 * p.vcpu_second_micros + secs * 4096 / 1024 * p.memory_gib_second_micros;
      const storage = secs * 8192 / 1024 * p.disk_gib_second_micros;
      return [Math.round(compute), Math.round(storage), Math.round(compute + storage)];
    };
    assert.deepEqual([est.usage.compute_micros, est.usage.storage_micros, est.usage.cost_micros], want(est.prices));
    assert.deepEqual([est.usage.running_seconds, est.usage.vcpu_seconds, est.usage.memory_gib_seconds, est.usage.disk_gib_seconds],
      [1800, 3600, 7200, 14400]);
    assert.deepEqual(est.prices, all.prices);
    const small = await zeish.estimate();
    assert.deepEqual([small.sandboxes, small.vcpus, small.memory_mib, small.disk_mib, small.minutes], [1, 1, 512, 2048, 60]);
    await assert.rejects(zeish.estimate({ sandboxes: 0 }), (e: unknown) => e instanceof InvalidArgumentError && e.code === "invalid_argument");
    await assert.rejects(zeish.estimate({ minutes: 527041 }), InvalidArgumentError);
  }

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
    // The name works wherever the id does.
    const byName = await Sandbox.connect("ts-sdk", { zeish });
    assert.equal(byName.id, sbx.id);
    assert.equal((await byName.exec("hostname")).stdout, "ts-sdk\n");
    await accountsAndKeys(zeish, sbx.id);

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

    await terminal(sbx);

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
    const { pauseMs, sandboxes } = await sbx.clone({ count: 1, maxCostMicros: 9_000_000_000 });
    console.log(`clone: ${Date.now() - t1} ms (parent paused ${pauseMs} ms)`);
    assert.equal(sandboxes.length, 1);
    const child = sandboxes[0]!;
    assert.equal(child.state, "running");
    assert.notEqual(child.id, sbx.id);
    assert.equal(child.info.parent_id, sbx.id);
    assert.equal(child.info.max_cost_micros, 9_000_000_000);
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
    await usageAndPrices(zeish, [sbx.id, child.id]);
    console.log(`vm test total: ${Date.now() - t0} ms`);
  }));
});

/** A terminal through the SDK: size, resize, Ctrl-C, detach and re-attach, exit code, refusals. */
async function terminal(sbx: Sandbox): Promise<void> {
  const screen = (t: Terminal) => {
    let text = "";
    const waiters: Array<() => void> = [];
    t.onData = (c) => {
      text += new TextDecoder().decode(c);
      waiters.splice(0).forEach((w) => w());
    };
    return {
      text: () => text,
      async waitFor(want: string): Promise<void> {
        const deadline = Date.now() + 60_000;
        while (!text.includes(want)) {
          if (Date.now() > deadline) throw new Error(`terminal never showed ${JSON.stringify(want)}: ${JSON.stringify(text)}`);
          await new Promise<void>((r) => { waiters.push(r); setTimeout(r, 1000); });
        }
      },
    };
  };
  const t = await sbx.terminal({ rows: 24, cols: 80, env: { PS1: "$ " } });
  assert.ok(t.pid > 1);
  const out = screen(t);
  t.write("stty size\n");
  await out.waitFor("24 80");
  t.resize(40, 120);
  t.write("stty size\n");
  await out.waitFor("40 120");
  t.write("sh -c 'echo sleeping; exec sleep 300'\n");
  await out.waitFor("sleeping\r\n");
  t.write("\x03");
  t.write("echo rc=$?\n");
  await out.waitFor("rc=130");
  const refused = new Promise<unknown>((r) => { t.onRefused = r; });
  t.signal("BOGUS");
  assert.ok(isZeishError(await refused, "invalid_argument"));
  assert.throws(() => t.resize(0, 0), (e: unknown) => e instanceof InvalidArgumentError);
  t.write("echo mark-$((6*7))\n");
  await out.waitFor("mark-42");
  t.close();
  await assert.rejects(t.exited, (e: unknown) => isZeishError(e, "unavailable"));

  const list = await sbx.terminals();
  assert.deepEqual(list.map((x) => [x.pid, x.exited]), [[t.pid, false]]);
  const again = await sbx.attachTerminal(t.pid, { rows: 30, cols: 90 });
  const out2 = screen(again);
  await out2.waitFor("mark-42");
  again.write("stty size; exit 6\n");
  await out2.waitFor("30 90");
  assert.equal((await again.exited).exit_code, 6);
  await assert.rejects(sbx.terminal({ rows: 0, cols: 0 }), (e: unknown) => e instanceof InvalidArgumentError);
}
