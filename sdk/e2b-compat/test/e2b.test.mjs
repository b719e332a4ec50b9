// The unmodified npm `e2b` SDK against a real zeishd with real VMs, at the
// version E2B_SDK names (one of the aliases in package.json; test/run.mjs
// runs each). Every test is named "<area>: <what E2B documents that it
// reproduces>"; the areas are the rows of run.mjs's table. Sandboxes are
// shared within a run: the base one (sbx) and the debian one (deb) serve
// most tests, fork children the ones that end a sandbox. docs/e2b.md lists
// what is served.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { request as httpRequest } from "node:http";
import { after, before, describe, test } from "node:test";
import { Harness, e2bDomain, sdk, vmSkipReason } from "./harness.mjs";

const skip = vmSkipReason();
const { module: e2b, version, atLeast, newest } = await sdk();
const {
  AuthenticationError, CommandExitError, FileNotFoundError, InvalidArgumentError, Sandbox, SandboxError,
  SandboxNotFoundError, Template, TimeoutError,
} = e2b;
const unknownID = "sbx_00000000000000000000";

/** Polls fn until it returns a truthy value; the deadline only bounds a hang. */
async function eventually(what, fn, ms = 120_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms / 1000}s`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

async function rejectsWith(promise, cls, what, message) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof cls, `${what}: got ${err?.constructor?.name}: ${err?.message}, want ${cls.name}`);
    if (message) assert.match(err.message, message, what);
    return true;
  });
}

describe(`e2b ${version} on zeish`, { skip, timeout: 40 * 60_000 }, () => {
  let h;
  let sbx; // the base sandbox most tests share
  let deb; // the debian one: E2B's `user`, bash, git
  let kids = []; // fork children, ended by the lifecycle tests
  const o = (extra) => h.opts(extra);

  before(async () => {
    h = await Harness.start();
    // Once seen: a create hung with zeishd idle. Bounded, it fails with zeishd's log instead.
    [sbx, deb] = await h.within(8 * 60_000, "the first two creates", Promise.all([
      Sandbox.create("base", o({ timeoutMs: 3_600_000, metadata: { suite: "e2b", role: "main" }, envs: { GREETING: "hi there" } })),
      Sandbox.create("debian", o({ timeoutMs: 3_600_000, metadata: { suite: "e2b", role: "deb" } })),
    ]));
  });
  after(async () => {
    await h?.stop();
  });

  test("lifecycle: Sandbox.create (template alias, metadata, envs), getInfo, isRunning (envd /health 204), Sandbox.getInfo", async () => {
    assert.match(sbx.sandboxId, /^sbx_/);
    const info = await sbx.getInfo();
    assert.equal(info.sandboxId, sbx.sandboxId);
    assert.equal(info.templateId, "base");
    assert.equal(info.state, "running");
    assert.equal(info.metadata.role, "main");
    assert.equal(info.envdVersion, "0.6.4");
    assert.ok(info.endAt > info.startedAt, "endAt is the timeout");
    assert.equal(await sbx.isRunning(), true);
    assert.equal((await sbx.commands.run("echo \"$GREETING\"")).stdout, "hi there\n");
    assert.equal((await Sandbox.getInfo(sbx.sandboxId, o())).state, "running");
  });

  test("lifecycle: API keys: a key's E2B form (e2b_<hex>) passes the SDK's own check (2.45 refuses anything else) and opens the same account", async () => {
    assert.match(h.e2bKey, /^e2b_[0-9a-f]+$/);
    const ids = (await Sandbox.list(o()).nextItems()).map((s) => s.sandboxId);
    assert.ok(ids.includes(sbx.sandboxId), "listed with the E2B form");
    if (atLeast("2.46.0")) {
      const withZk = (await Sandbox.list(o({ apiKey: h.apiKey })).nextItems()).map((s) => s.sandboxId);
      assert.deepEqual(withZk.sort(), ids.sort(), "the zk_ form is the same key");
    } else {
      await rejectsWith(Sandbox.list(o({ apiKey: h.apiKey })).nextItems(), AuthenticationError, "2.45 checks the key's form itself",
        /Invalid API key format/);
    }
    await rejectsWith(Sandbox.list(o({ apiKey: "e2b_" + "0".repeat(48) })).nextItems(), AuthenticationError, "a well-formed unknown key");
  });

  test("files: write, read (text, bytes), relative paths, batch write (names of digits too), list with depth, exists, getInfo, makeDir, rename, remove (a missing path too)", async () => {
    const w = await sbx.files.write("/root/a.txt", "alpha");
    assert.equal(w.path, "/root/a.txt");
    assert.equal(w.name, "a.txt");
    assert.equal(await sbx.files.read("/root/a.txt"), "alpha");
    assert.deepEqual(Buffer.from(await sbx.files.read("/root/a.txt", { format: "bytes" })), Buffer.from("alpha"));
    await sbx.files.write("rel.txt", "relative");
    assert.equal(await sbx.files.read("/root/rel.txt"), "relative", "relative paths are under root's home");
    await sbx.files.write("/root/gz.txt", "zipped on the way", { gzip: true }); // octet-stream, Content-Encoding: gzip
    assert.equal(await sbx.files.read("/root/gz.txt", { gzip: true }), "zipped on the way", "gzip both ways");

    const batch = await sbx.files.write([{ path: "/root/d/x.txt", data: "x" }, { path: "/root/d/e/y.txt", data: "yy" }]);
    assert.deepEqual(batch.map((e) => e.path).sort(), ["/root/d/e/y.txt", "/root/d/x.txt"]);
    // Names of digits, relative and absolute, multipart and streamed: each where it was named.
    const digits = await sbx.files.write([{ path: "0", data: "zero" }, { path: "/root/n/1", data: "one" }]);
    assert.deepEqual(digits.map((e) => e.path), ["/root/0", "/root/n/1"]);
    const streamed = await sbx.files.write([{ path: "2", data: new Blob(["two"]).stream() }, { path: "n/3", data: new Blob(["three"]).stream() }]);
    assert.deepEqual(streamed.map((e) => e.path).sort(), ["/root/2", "/root/n/3"]);
    assert.equal((await sbx.commands.run("cat /root/0 /root/n/1 /root/2 /root/n/3; echo; ls /0 /1 /2 2>/dev/null | wc -l")).stdout, "zeroonetwothree\n0\n", "nothing at /0");

    const one = await sbx.files.list("/root/d");
    assert.deepEqual(one.map((e) => `${e.name}:${e.type}`).sort(), ["e:dir", "x.txt:file"]);
    const two = await sbx.files.list("/root/d", { depth: 2 });
    assert.deepEqual(two.map((e) => e.path).sort(), ["/root/d/e", "/root/d/e/y.txt", "/root/d/x.txt"]);
    assert.equal(two.find((e) => e.name === "y.txt").size, 2);

    assert.equal(await sbx.files.exists("/root/d/x.txt"), true);
    assert.equal(await sbx.files.exists("/root/nope"), false);
    assert.equal((await sbx.files.getInfo("/root/d")).type, "dir");
    assert.equal(await sbx.files.makeDir("/root/m/n"), true);
    assert.equal(await sbx.files.makeDir("/root/m/n"), false, "makeDir of an existing dir is false");
    await rejectsWith(sbx.files.makeDir("/root/a.txt"), InvalidArgumentError, "makeDir over a file (envd: not a directory)");

    const moved = await sbx.files.rename("/root/a.txt", "/root/new/dir/b.txt");
    assert.equal(moved.path, "/root/new/dir/b.txt", "rename makes the destination's folders, as envd does");
    assert.equal(await sbx.files.exists("/root/a.txt"), false);
    assert.equal(await sbx.files.read("/root/new/dir/b.txt"), "alpha");

    await sbx.files.remove("/root/d");
    assert.equal(await sbx.files.exists("/root/d"), false);
    await sbx.files.remove("/root/never-there"); // envd removes with RemoveAll: nothing there is no error
    await rejectsWith(sbx.files.read("/root/d/x.txt"), FileNotFoundError, "read of a removed file");
    await rejectsWith(sbx.files.getInfo("/root/missing"), FileNotFoundError, "getInfo of a missing file");
  });

  test("files: entries as envd gives them: mode is the permission bits (a directory 0755 is 493), owner and group by name, a symlink typed by what it leads to with its absolute target", async () => {
    await sbx.commands.run("mkdir -p /root/ent/d && chmod 750 /root/ent/d && echo hi > /root/ent/f && chmod 640 /root/ent/f && " +
      "cd /root/ent && ln -s f lf && ln -s d ld && ln -s nowhere dang && mkfifo p");
    const d = await sbx.files.getInfo("/root/ent/d");
    assert.deepEqual([d.type, d.mode, d.permissions, d.owner, d.group], ["dir", 0o750, "drwxr-x---", "root", "root"]);
    assert.equal((await sbx.files.getInfo("/root")).mode, 0o700);
    assert.equal((await sbx.files.getInfo("/usr")).mode, 493, "0755, never Go's 2147484141");
    const f = await sbx.files.getInfo("/root/ent/f");
    assert.deepEqual([f.type, f.mode, f.permissions, f.size, f.owner], ["file", 0o640, "-rw-r-----", 3, "root"]);
    assert.ok(f.modifiedTime instanceof Date && f.modifiedTime.getTime() > 0);
    const lf = await sbx.files.getInfo("/root/ent/lf");
    assert.deepEqual([lf.type, lf.mode, lf.symlinkTarget, lf.permissions], ["file", 0o640, "/root/ent/f", "Lrwxrwxrwx"]);
    const ld = await sbx.files.getInfo("ent/ld");
    assert.deepEqual([ld.type, ld.path, ld.symlinkTarget], ["dir", "/root/ent/ld", "/root/ent/d"]);
    const dang = await sbx.files.getInfo("/root/ent/dang");
    assert.deepEqual([dang.type, dang.symlinkTarget], [undefined, "/root/ent/dang"], "a dangling link: untyped, its own path");
    // list leaves out what envd gives no type (the fifo, the dangling link); its entries are getInfo's.
    const listed = await sbx.files.list("/root/ent");
    assert.deepEqual(listed.map((e) => e.name).sort(), ["d", "f", "ld", "lf"]);
    assert.deepEqual(listed.find((e) => e.name === "lf"), lf);
    await sbx.files.write("/root/ent/d/inner", "i");
    assert.deepEqual((await sbx.files.list("/root/ent/ld")).map((e) => e.path), ["/root/ent/ld/inner"], "a link to a directory lists as it");
    const mine = await deb.files.write("notes/owned.txt", "mine");
    assert.deepEqual([(await deb.files.getInfo(mine.path)).owner, (await deb.files.getInfo("notes")).group], ["user", "user"]);
  });

  test("files: metadata on write (X-Metadata-*, envd ≥ 0.6.2) is kept in the file's user.e2b.* xattrs and shown by getInfo and list; a rewrite replaces it", async () => {
    const w = await sbx.files.write("/root/meta.txt", "m", { metadata: { Team: "infra", "build-id": "42" } });
    const want = { team: "infra", "build-id": "42" }; // envd lowercases the keys (HTTP headers have no case)
    assert.deepEqual(w.metadata, want);
    assert.deepEqual((await sbx.files.getInfo("/root/meta.txt")).metadata, want);
    assert.deepEqual((await sbx.files.list("/root")).find((e) => e.name === "meta.txt").metadata, want);
    const both = await sbx.files.write([{ path: "/root/mb/1", data: "1" }, { path: "/root/mb/2", data: "2" }], { metadata: { k: "v" } });
    assert.deepEqual(both.map((e) => e.metadata), [{ k: "v" }, { k: "v" }], "one map for every file of a batch");
    await sbx.files.write("/root/meta.txt", "again");
    assert.equal((await sbx.files.getInfo("/root/meta.txt")).metadata, undefined, "a rewrite without metadata has none");
    if ((await sbx.commands.run("command -v setfattr || true")).stdout.trim() !== "") {
      await sbx.commands.run("setfattr -n user.e2b.inside -v yes /root/meta.txt");
      assert.deepEqual((await sbx.files.getInfo("/root/meta.txt")).metadata, { inside: "yes" }, "set in the guest");
    }
    await rejectsWith(sbx.files.write("/root/bad.txt", "x", { metadata: { k: "caf\u00e9" } }), InvalidArgumentError, "a value that is not printable ASCII");
  });

  test("files: 50 MiB upload (multipart and octet-stream) and download, bytes intact (2 MiB but with the newest SDK: the path is the same)", async () => {
    const data = randomBytes((newest ? 50 : 2) << 20);
    await sbx.files.write("/root/big.bin", new Blob([data]));
    const back = Buffer.from(await sbx.files.read("/root/big.bin", { format: "bytes" }));
    assert.ok(back.equals(data), "multipart upload read back");
    await sbx.files.write("/root/big2.bin", new Blob([data]).stream());
    const r = await sbx.commands.run("cmp /root/big.bin /root/big2.bin && wc -c < /root/big2.bin");
    assert.equal(r.stdout.trim(), String(data.length));
    await sbx.files.remove("/root/big.bin");
    await sbx.files.remove("/root/big2.bin");
  });

  test("commands: run: stdout, stderr, exit codes (CommandExitError), envs, cwd, onStdout", async () => {
    const r = await sbx.commands.run("echo out; echo err >&2");
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, "out\n");
    assert.equal(r.stderr, "err\n");
    await assert.rejects(sbx.commands.run("echo failing >&2; exit 3"), (err) => {
      assert.ok(err instanceof CommandExitError, `got ${err}`);
      assert.equal(err.exitCode, 3);
      assert.equal(err.stderr, "failing\n");
      return true;
    });
    assert.equal((await sbx.commands.run("echo $A-$B", { envs: { A: "1", B: "2" } })).stdout, "1-2\n");
    assert.equal((await sbx.commands.run("pwd", { cwd: "/tmp" })).stdout, "/tmp\n");
    assert.equal((await sbx.commands.run("pwd")).stdout, "/root\n", "default cwd is the user's home");
    const seen = [];
    await sbx.commands.run("echo a; echo b", { onStdout: (d) => seen.push(d) });
    assert.equal(seen.join(""), "a\nb\n");
  });

  test("commands: background, list, connect after disconnect, sendStdin, closeStdin, kill", async () => {
    const sleeper = await sbx.commands.run("sleep 300", { background: true });
    assert.ok((await sbx.commands.list()).some((p) => p.pid === sleeper.pid), "list shows the background process");
    assert.equal(await sbx.commands.kill(sleeper.pid), true);
    await assert.rejects(sleeper.wait(), CommandExitError);
    assert.equal(await sbx.commands.kill(sleeper.pid), false, "kill of a process that ended");

    const cat = await sbx.commands.run("cat", { background: true, stdin: true });
    await sbx.commands.sendStdin(cat.pid, "hello ");
    await sbx.commands.sendStdin(cat.pid, "stdin\n");
    await sbx.commands.closeStdin(cat.pid);
    assert.equal((await cat.wait()).stdout, "hello stdin\n");

    // The stream drops; the process carries on and is attached again.
    const ticker = await sbx.commands.run("read x; echo got $x; sleep 1; echo done", { background: true, stdin: true });
    await ticker.disconnect();
    const again = await sbx.commands.connect(ticker.pid);
    await sbx.commands.sendStdin(ticker.pid, "it\n");
    assert.match((await again.wait()).stdout, /got it\ndone\n/);
  });

  test("commands: debian: commands, PTY and files act as E2B's default `user` (home, ownership), root when asked; an unknown user is envd's AuthenticationError", async () => {
    const who = await deb.commands.run("id -un; pwd; echo $HOME; echo $0");
    assert.equal(who.stdout, "user\n/home/user\n/home/user\n/bin/bash\n");
    assert.equal((await deb.commands.run("id -un; pwd", { user: "root" })).stdout, "root\n/root\n");
    await deb.files.write("notes/a.txt", "mine");
    assert.equal(await deb.files.read("/home/user/notes/a.txt"), "mine", "relative paths are under the user's home");
    assert.equal(await deb.files.makeDir("made/deep"), true);
    await deb.files.rename("notes/a.txt", "made/deep/b.txt");
    await deb.files.write("/root/by-root.txt", "r", { user: "root" });
    const owners = await deb.commands.run("stat -c '%U %n' notes made made/deep made/deep/b.txt /root/by-root.txt", { user: "root", cwd: "/home/user" });
    assert.equal(owners.stdout, "user notes\nuser made\nuser made/deep\nuser made/deep/b.txt\nroot /root/by-root.txt\n");
    await rejectsWith(deb.files.makeDir("/root/not-mine"), SandboxError, "makeDir where the user may not");
    await rejectsWith(deb.commands.run("id", { user: "nobody-here" }), AuthenticationError, "a user the sandbox lacks", /invalid username/);
    await rejectsWith(deb.files.read("/etc/hostname", { user: "nobody-here" }), AuthenticationError, "reading as a user the sandbox lacks");

    let out = "";
    const term = await deb.pty.create({ cols: 80, rows: 24, onData: (b) => (out += new TextDecoder().decode(b)) });
    await deb.pty.sendInput(term.pid, new TextEncoder().encode("echo \"I am $(id -un) in $PWD\"\n"));
    await eventually("the terminal answers", () => out.includes("I am user in /home/user"));
    assert.equal(await deb.pty.kill(term.pid), true);
  });

  test("pty: create, sendInput, resize, output, disconnect and connect, kill; an exit code", async () => {
    const enc = (s) => new TextEncoder().encode(s);
    const dec = new TextDecoder();
    let out = "";
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d, { stream: true }); } });
    await sbx.pty.sendInput(term.pid, enc("stty size; tty; echo \"term=$TERM\"\n"));
    await eventually("the terminal answers", () => /24 80/.test(out) && /term=xterm-256color/.test(out));
    assert.match(out, /\/dev\/pts\/\d+/, "a real pseudo-terminal");
    await sbx.pty.resize(term.pid, { cols: 132, rows: 40 });
    await sbx.pty.sendInput(term.pid, enc("stty size\n"));
    await eventually("the new size", () => /40 132/.test(out));
    assert.ok((await sbx.commands.list()).some((p) => p.pid === term.pid), "commands.list shows the terminal");
    await term.disconnect();
    let again = "";
    const back = await sbx.pty.connect(term.pid, { onData: (d) => { again += dec.decode(d, { stream: true }); } });
    await sbx.pty.sendInput(term.pid, enc("echo still-$((6*7))\n"));
    await eventually("the re-attached terminal answers", () => again.includes("still-42"));
    assert.equal(back.pid, term.pid);
    assert.equal(await sbx.pty.kill(term.pid), true);
    await assert.rejects(back.wait(), CommandExitError, "a killed terminal");
    assert.equal(await sbx.pty.kill(term.pid), false, "kill of a terminal that ended");

    const quitter = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} });
    await sbx.pty.sendInput(quitter.pid, enc("exit 7\n"));
    await assert.rejects(quitter.wait(), (err) => {
      assert.ok(err instanceof CommandExitError, `got ${err}`);
      assert.equal(err.exitCode, 7);
      return true;
    });
  });

  test("watch: watchDir (inotify in the guest): create, write, remove, rename, chmod, recursive; a missing directory", async () => {
    await sbx.files.makeDir("/root/w/sub");
    const seen = [];
    const handle = await sbx.files.watchDir("/root/w", (ev) => seen.push(`${ev.type} ${ev.name}`), { recursive: true });
    await sbx.files.write("/root/w/a.txt", "1");
    await eventually("create", () => seen.includes("create a.txt"));
    await sbx.files.write("/root/w/a.txt", "22");
    await eventually("write", () => seen.includes("write a.txt"));
    await sbx.files.write("/root/w/sub/b.txt", "b");
    await eventually("create below", () => seen.includes("create sub/b.txt"));
    await sbx.files.remove("/root/w/a.txt");
    await eventually("remove", () => seen.includes("remove a.txt"));
    await handle.stop();

    const flat = [];
    const top = await sbx.files.watchDir("/root/w", (ev) => flat.push(`${ev.type} ${ev.name}`));
    await sbx.files.write("/root/w/sub/c.txt", "c");
    await sbx.files.write("/root/w/d.txt", "d");
    await eventually("create", () => flat.includes("create d.txt"));
    await sbx.files.rename("/root/w/d.txt", "/root/w/e.txt");
    await eventually("rename", () => flat.includes("rename d.txt") && flat.includes("create e.txt"));
    await sbx.commands.run("chmod 600 /root/w/e.txt");
    await eventually("chmod", () => flat.includes("chmod e.txt"));
    assert.ok(!flat.includes("create sub/c.txt"), `not recursive: ${flat}`);
    assert.ok(!flat.some((e) => e.includes(".zeish-")), `the agent's temp files: ${flat}`);
    await top.stop();
    await rejectsWith(sbx.files.watchDir("/root/no-such-dir", () => {}), FileNotFoundError, "watch of a missing directory");
    await sbx.files.remove("/root/w");
  });

  test("watch: includeEntry (envd ≥ 0.6.3) gives created and written entries; a folder made in a recursive watch, and folders nested in it, miss no event", async () => {
    await sbx.files.makeDir("/root/we");
    const seen = [];
    const w = await sbx.files.watchDir("/root/we", (ev) => seen.push(ev), { recursive: true, includeEntry: true });
    const names = () => seen.map((ev) => `${ev.type} ${ev.name}`);
    await sbx.files.write("/root/we/f.txt", "abc");
    await eventually("create f.txt", () => names().includes("create f.txt"));
    const made = seen.find((ev) => ev.name === "f.txt" && ev.type === "create");
    assert.deepEqual([made.entry?.type, made.entry?.path, made.entry?.size, made.entry?.mode], ["file", "/root/we/f.txt", 3, 0o644]);
    // mkdir -p and a file at once: the new folders are watched as they come, nothing in them is missed.
    await sbx.commands.run("mkdir -p /root/we/a/b/c && echo x > /root/we/a/b/c/d.txt");
    await eventually("the new tree", () => ["create a", "create a/b", "create a/b/c", "create a/b/c/d.txt"].every((n) => names().includes(n)));
    await sbx.commands.run("mkdir /root/we/a/b/c/e && echo y > /root/we/a/b/c/e/f.txt");
    await eventually("a folder nested in the new one", () => names().includes("create a/b/c/e") && names().includes("create a/b/c/e/f.txt"));
    const dir = seen.find((ev) => ev.name === "a/b" && ev.type === "create");
    assert.deepEqual([dir.entry?.type, dir.entry?.mode], ["dir", 0o755]);
    for (const n of ["create a", "create a/b", "create a/b/c", "create a/b/c/d.txt"]) {
      assert.equal(names().filter((x) => x === n).length, 1, `${n} reported once: ${names()}`);
    }
    await sbx.files.remove("/root/we/f.txt");
    await eventually("remove", () => names().includes("remove f.txt"));
    assert.equal(seen.find((ev) => ev.type === "remove").entry, undefined, "a removed entry has none");
    await w.stop();
    await sbx.files.remove("/root/we");
  });

  test("watch: watchers, the polling form of watchDir Python's sync SDK uses (raw Connect): CreateWatcher, GetWatcherEvents, RemoveWatcher", async () => {
    const rpc = async (method, body) => {
      const res = await fetch(`${h.base}/e2b/envd/filesystem.Filesystem/${method}`, {
        method: "POST",
        headers: { "Content-Type": "application/json", "E2b-Sandbox-Id": sbx.sandboxId, "X-Access-Token": sbx.envdAccessToken },
        body: JSON.stringify(body),
      });
      return { status: res.status, body: await res.json() };
    };
    await sbx.files.makeDir("/root/cw");
    const made = await rpc("CreateWatcher", { path: "/root/cw" });
    assert.equal(made.status, 200, JSON.stringify(made.body));
    const id = made.body.watcherId;
    await sbx.files.write("/root/cw/one", "1");
    await sbx.files.remove("/root/cw/one");
    const seen = [];
    await eventually("the watcher's events", async () => {
      const got = await rpc("GetWatcherEvents", { watcherId: id });
      assert.equal(got.status, 200, JSON.stringify(got.body));
      for (const ev of got.body.events ?? []) seen.push(`${ev.type} ${ev.name}`);
      return seen.includes("EVENT_TYPE_REMOVE one");
    });
    assert.ok(seen.includes("EVENT_TYPE_CREATE one"), `${seen}`);
    assert.equal((await rpc("RemoveWatcher", { watcherId: id })).status, 200);
    assert.equal((await rpc("GetWatcherEvents", { watcherId: id })).body.code, "not_found");
    assert.equal((await rpc("CreateWatcher", { path: "/root/no-such-dir" })).body.code, "not_found");
    await sbx.files.remove("/root/cw");
  });

  test("git: init, configureUser, add, commit, status, branches, createBranch, checkoutBranch, remoteAdd, push, clone and pull (a local remote, as E2B's user)", async () => {
    const repo = "/home/user/repo";
    const remote = "/home/user/remote.git";
    const clone = "/home/user/clone";
    await deb.git.init(remote, { bare: true, initialBranch: "main" });
    await deb.git.init(repo, { initialBranch: "main" });
    await deb.git.configureUser("Zeish Test", "test@example.com");
    assert.equal(await deb.git.getConfig("user.name"), "Zeish Test");
    await deb.files.write(`${repo}/README.md`, "hello\n");
    let st = await deb.git.status(repo);
    assert.equal(st.currentBranch, "main");
    assert.equal(st.hasUntracked, true);
    await deb.git.add(repo);
    await deb.git.commit(repo, "first");
    assert.equal((await deb.git.status(repo)).isClean, true);
    await deb.git.remoteAdd(repo, "origin", remote);
    await deb.git.push(repo, { remote: "origin", branch: "main", setUpstream: true });
    await deb.git.createBranch(repo, "feature");
    let br = await deb.git.branches(repo);
    assert.deepEqual([br.branches.sort(), br.currentBranch], [["feature", "main"], "feature"]);
    await deb.git.checkoutBranch(repo, "main");
    assert.equal((await deb.git.branches(repo)).currentBranch, "main");
    await deb.git.clone(remote, { path: clone });
    assert.equal(await deb.files.read(`${clone}/README.md`), "hello\n");
    await deb.files.write(`${repo}/README.md`, "hello again\n");
    await deb.git.add(repo);
    await deb.git.commit(repo, "second");
    await deb.git.push(repo);
    await deb.git.pull(clone);
    assert.equal(await deb.files.read(`${clone}/README.md`), "hello again\n");
    assert.equal((await deb.files.getInfo(`${clone}/README.md`)).owner, "user");
  });

  test("metrics: getMetrics, Sandbox.getMetrics: CPU, memory and disk sampled from the guest every 5 s; start and end bound them; an unknown sandbox is SandboxNotFoundError", async () => {
    const first = await eventually("two samples", async () => { const m = await sbx.getMetrics(); return m.length >= 2 && m; });
    for (const m of first) {
      assert.ok(m.timestamp instanceof Date, "timestamp");
      assert.ok(m.cpuCount >= 1 && m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100, `cpu ${m.cpuCount} ${m.cpuUsedPct}`);
      assert.ok(m.memUsed > 0 && m.memUsed < m.memTotal, `memory ${m.memUsed}/${m.memTotal}`);
      assert.ok(m.diskUsed > 0 && m.diskUsed < m.diskTotal, `disk ${m.diskUsed}/${m.diskTotal}`);
    }
    for (let i = 1; i < first.length; i++) assert.ok(first[i].timestamp > first[i - 1].timestamp, "in time order");
    // Sampled over time: 24 MiB more on the disk shows in a later sample.
    const before = first.at(-1);
    await sbx.commands.run("head -c 25165824 /dev/urandom > /root/metrics.bin && sync");
    await eventually("the disk's use grows", async () => (await Sandbox.getMetrics(sbx.sandboxId, o())).at(-1).diskUsed >= before.diskUsed + (20 << 20));
    const one = await Sandbox.getMetrics(sbx.sandboxId, o({ start: first[1].timestamp, end: first[1].timestamp }));
    assert.deepEqual(one.map((m) => m.timestamp.getTime()), [first[1].timestamp.getTime()]);
    await sbx.files.remove("/root/metrics.bin");
    await rejectsWith(Sandbox.getMetrics(unknownID, o()), SandboxNotFoundError, "getMetrics of an unknown sandbox");
  });

  test("signing: downloadUrl and uploadUrl of a secured sandbox: signed with its access token, expiring, expired and tampered signatures answered as envd does", async () => {
    await sbx.files.write("/root/signed.txt", "signed content");
    // With E2B_SANDBOX_URL set the SDK's URL names no sandbox (it drops that URL's path): zeish says why.
    const plain = await fetch(await sbx.downloadUrl("/root/signed.txt"));
    assert.equal(plain.status, 400);
    assert.match((await plain.json()).message, /names its sandbox by host name/);
    // By host name (E2B_DOMAIN), as on E2B's cloud: a TLS proxy would stand in front of zeishd.
    const byHost = await Sandbox.connect(sbx.sandboxId, { apiUrl: `${h.base}/e2b`, apiKey: h.e2bKey, domain: e2bDomain, requestTimeoutMs: 600_000 });
    const viaZeish = (u, method = "GET", body, headers = {}) => new Promise((resolve, reject) => {
      const url = new URL(u);
      const lookup = (_n, opts, cb) => (opts?.all ? cb(null, [{ address: "127.0.0.1", family: 4 }]) : cb(null, "127.0.0.1", 4));
      const req = httpRequest({ host: url.hostname, port: h.port, path: url.pathname + url.search, method, headers, lookup }, (res) => {
        let text = "";
        res.on("data", (d) => (text += d));
        res.on("end", () => resolve({ status: res.statusCode, text }));
      });
      req.on("error", reject);
      req.end(body);
    });
    const url = await byHost.downloadUrl("/root/signed.txt");
    assert.equal(new URL(url).host, `49983-${sbx.sandboxId}.${e2bDomain}`);
    assert.deepEqual(await viaZeish(url), { status: 200, text: "signed content" });
    assert.equal((await viaZeish(await byHost.downloadUrl("/root/signed.txt", { useSignatureExpiration: 120 }))).status, 200, "not yet expired");
    assert.equal((await viaZeish(await byHost.downloadUrl("/root/signed.txt", { user: "root" }))).status, 200, "signed for a user");
    const expired = await viaZeish(await byHost.downloadUrl("/root/signed.txt", { useSignatureExpiration: -10 }));
    assert.deepEqual([expired.status, JSON.parse(expired.text).message], [401, "signature is already expired"]);
    const tampered = new URL(url);
    tampered.searchParams.set("path", "/etc/shadow");
    assert.deepEqual([(await viaZeish(tampered.toString())).status], [401], "a signature covers its path");
    const unsigned = new URL(url);
    unsigned.searchParams.delete("signature");
    assert.equal(JSON.parse((await viaZeish(unsigned.toString())).text).message, "missing signature query parameter");

    const up = await byHost.uploadUrl("/root/up/signed-up.txt");
    const form = new Request("http://x/", { method: "POST", body: (() => { const fd = new FormData(); fd.append("file", new Blob(["uploaded"]), "ignored"); return fd; })() });
    const posted = await viaZeish(up, "POST", Buffer.from(await form.arrayBuffer()), { "Content-Type": form.headers.get("content-type") });
    assert.equal(posted.status, 200, posted.text);
    assert.equal(await sbx.files.read("/root/up/signed-up.txt"), "uploaded");
    assert.equal((await viaZeish(up)).status, 401, "an upload signature does not read");
  });

  test("lifecycle: sbx.getHost(port): a server in the sandbox through zeish's port proxy, private ports with the traffic token", async (t) => {
    if (!h.networked) {
      if (process.env.CI) throw new Error("CI is set: guest ports need zeishd in its own network namespace (root)");
      t.skip("guest ports need root (zeishd in a network namespace of the test's own)");
      return;
    }
    await sbx.files.write("/root/www/index.html", "hello from the guest\n");
    const srv = await sbx.commands.run("busybox httpd -f -p 8000 -h /root/www", { background: true });
    const host = sbx.getHost(8000);
    assert.equal(host, `8000-${sbx.sandboxId}.${e2bDomain}`);
    const get = (path, headers = {}) => h.hostGet(host, path, headers);
    assert.ok(sbx.trafficAccessToken, "create answers a traffic token");
    const ok = await eventually("the guest's server answers", async () => {
      const r = await get("/index.html", { "e2b-traffic-access-token": sbx.trafficAccessToken });
      return r.status === 200 && r;
    });
    assert.equal(ok.body, "hello from the guest\n");
    assert.equal((await get("/index.html")).status, 401, "a private port needs the token");
    assert.equal((await get("/index.html", { "e2b-traffic-access-token": "nope" })).status, 401, "a bad token");
    assert.equal((await h.zeish("POST", `/sandboxes/${sbx.sandboxId}/ports`, { port: 8000, public: true })).status, 200);
    assert.equal((await get("/index.html")).status, 200, "a public port needs none");
    assert.equal(await sbx.commands.kill(srv.pid), true);
  });

  test("lifecycle: Sandbox.list: metadata and state filters, limit and nextToken pages, order (asc|desc by start), startedAfter", async () => {
    const mine = await Sandbox.list(o({ query: { metadata: { role: "main" } } })).nextItems();
    assert.deepEqual(mine.map((s) => s.sandboxId), [sbx.sandboxId]);
    const both = await Sandbox.list(o({ query: { metadata: { suite: "e2b" }, state: ["running"] } })).nextItems();
    assert.deepEqual(both.map((s) => s.sandboxId).sort(), [sbx.sandboxId, deb.sandboxId].sort());
    assert.deepEqual(await Sandbox.list(o({ query: { state: ["paused"] } })).nextItems(), []);
    const pager = Sandbox.list(o({ limit: 1, query: { metadata: { suite: "e2b" } } }));
    const first = await pager.nextItems();
    assert.equal(first.length, 1);
    assert.equal(pager.hasNext, true);
    const second = await pager.nextItems();
    assert.deepEqual([second.length, pager.hasNext], [1, false]);
    assert.notEqual(first[0].sandboxId, second[0].sandboxId);
    const starts = (list) => list.map((s) => s.startedAt.getTime());
    const asc = await Sandbox.list(o({ order: "asc", query: { metadata: { suite: "e2b" } } })).nextItems();
    const desc = await Sandbox.list(o({ order: "desc", query: { metadata: { suite: "e2b" } } })).nextItems();
    assert.deepEqual(starts(asc), [...starts(asc)].sort((a, b) => a - b), "asc: oldest first");
    assert.deepEqual(desc.map((s) => s.sandboxId), asc.map((s) => s.sandboxId).reverse(), "desc (the default): newest first");
    const later = asc.at(-1);
    const after = await Sandbox.list(o({ query: { metadata: { suite: "e2b" }, startedAfter: later.startedAt } })).nextItems();
    assert.ok(after.every((s) => s.startedAt >= later.startedAt) && after.some((s) => s.sandboxId === later.sandboxId), "startedAfter is at or after");
    const none = await Sandbox.list(o({ query: { startedAfter: new Date(Date.now() + 3_600_000) } })).nextItems();
    assert.deepEqual(none, []);
  });

  test("lifecycle: pause, pause again (false), connect resumes it with files and processes; connecting to a running sandbox never shortens its end", async () => {
    await sbx.files.write("/root/kept.txt", "before pause");
    const sleeper = await sbx.commands.run("sleep 600", { background: true });
    assert.equal(await sbx.pause(), true);
    assert.equal(await sbx.betaPause(), false, "already paused (betaPause is pause)");
    assert.equal((await sbx.getInfo()).state, "paused");
    assert.equal(await sbx.isRunning(), false);
    const back = await Sandbox.connect(sbx.sandboxId, o());
    assert.equal((await back.getInfo()).state, "running");
    assert.equal(await back.files.read("/root/kept.txt"), "before pause");
    assert.ok((await back.commands.list()).some((p) => p.pid === sleeper.pid), "the process survived the pause");
    assert.equal(await back.commands.kill(sleeper.pid), true);
    const end = (await sbx.getInfo()).endAt;
    await sbx.connect({ timeoutMs: 60_000 }); // running: only ever extended
    assert.equal((await sbx.getInfo()).endAt.getTime(), end.getTime());
  });

  test("snapshots and fork: Sandbox.fork: children carry the parent's files, and are sandboxes of their own", async () => {
    await sbx.files.write("/root/forked.txt", "from the parent");
    kids = await sbx.fork({ count: 2, timeoutMs: 600_000 });
    assert.equal(kids.length, 2);
    for (const kid of kids) {
      assert.ok(kid instanceof Sandbox, `fork result: ${kid}`);
      assert.equal(await kid.files.read("/root/forked.txt"), "from the parent");
      await kid.files.write("/root/forked.txt", "changed in " + kid.sandboxId);
    }
    assert.equal(await sbx.files.read("/root/forked.txt"), "from the parent");
  });

  test("lifecycle: a sandbox killed while commands.run waits is E2B's TimeoutError (its end of life), never an exit code", async () => {
    const [kid] = kids;
    // Its outcome is taken at once: the rejection comes while kill is awaited.
    const outcome = kid.commands.run("sleep 120").then(() => new Error("the command ended"), (err) => err);
    await eventually("the command runs", async () => (await kid.commands.list()).some((p) => p.args.includes("sleep 120")));
    assert.equal(await Sandbox.kill(kid.sandboxId, o()), true);
    const err = await outcome;
    assert.ok(err instanceof TimeoutError, `got ${err?.constructor?.name}: ${err?.message}`);
    assert.match(err.message, /end of life/);
  });

  test("lifecycle: setTimeout: shortened, the sandbox is killed when it passes; kill then finds nothing (false), getInfo SandboxNotFoundError, isRunning false", async () => {
    const kid = kids[1];
    const before = (await kid.getInfo()).endAt;
    await kid.setTimeout(2_000);
    assert.ok((await kid.getInfo()).endAt < before, "endAt moved earlier");
    await eventually("killed by its timeout", async () => {
      try {
        await Sandbox.getInfo(kid.sandboxId, o());
        return false;
      } catch (err) {
        assert.ok(err instanceof SandboxNotFoundError, `got ${err}`);
        return true;
      }
    });
    assert.equal(await Sandbox.kill(kid.sandboxId, o()), false);
    assert.equal(await kid.isRunning(), false);
  });

  test("snapshots and fork: createSnapshot, listSnapshots, Sandbox.create(snapshotId) starts from it, deleteSnapshot", async () => {
    await sbx.files.write("/root/snap.txt", "at the snapshot");
    const snap = await sbx.createSnapshot();
    assert.match(snap.snapshotId, /^snp_/);
    assert.equal(snap.names.length, 1);
    await sbx.files.write("/root/snap.txt", "after the snapshot");
    const mine = await Sandbox.listSnapshots(o({ sandboxId: sbx.sandboxId })).nextItems();
    assert.deepEqual(mine.map((s) => s.snapshotId), [snap.snapshotId]);
    assert.ok((await Sandbox.listSnapshots(o()).nextItems()).some((s) => s.snapshotId === snap.snapshotId), "listed account-wide");
    const kid = await Sandbox.create(snap.snapshotId, o({ timeoutMs: 600_000 }));
    assert.notEqual(kid.sandboxId, sbx.sandboxId);
    assert.equal(await kid.files.read("/root/snap.txt"), "at the snapshot");
    assert.equal(await sbx.files.read("/root/snap.txt"), "after the snapshot");
    assert.equal(await kid.kill(), true);
    await rejectsWith(Sandbox.createSnapshot(unknownID, o()), SandboxNotFoundError, "createSnapshot of an unknown sandbox");
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, o()), true);
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, o()), false);
    assert.equal(await Sandbox.deleteSnapshot("base", o()), false);
    assert.deepEqual(await Sandbox.listSnapshots(o({ sandboxId: sbx.sandboxId })).nextItems(), []);
  });

  test("lifecycle: onTimeout pause with autoResume: paused when the timeout passes (memory kept); a request to it resumes it (envd, and a port's traffic)", async () => {
    const life = await Sandbox.create("base", o({ timeoutMs: 3_600_000, lifecycle: { onTimeout: "pause", autoResume: true } }));
    kids.push(life);
    assert.deepEqual((await life.getInfo()).lifecycle, { onTimeout: "pause", autoResume: true });
    await life.files.write("/root/note", "kept");
    const bg = await life.commands.run("sleep 600", { background: true });
    await life.setTimeout(1_000);
    await eventually("paused by its timeout", async () => (await life.getInfo()).state === "paused");
    // E2B: with autoResume, a request to a paused sandbox resumes it; the SDK never knows.
    assert.equal((await life.commands.run("cat /root/note")).stdout, "kept");
    assert.equal((await life.getInfo()).state, "running");
    assert.ok((await life.commands.list()).some((p) => p.pid === bg.pid), "its memory was kept");
    if (h.networked) {
      await life.files.write("/root/www/i.html", "awake\n");
      await life.commands.run("busybox httpd -p 8001 -h /root/www");
      await life.setTimeout(1_000);
      await eventually("paused again", async () => (await life.getInfo()).state === "paused");
      const r = await h.hostGet(life.getHost(8001), "/i.html", { "e2b-traffic-access-token": life.trafficAccessToken });
      assert.deepEqual([r.status, r.body], [200, "awake\n"], "a port's traffic resumed it");
    }
    await life.setTimeout(600_000);
  });

  test("lifecycle: filesystem-only pause (keepMemory: false) is paused, not resumed by traffic, and connect brings it back with its disk", async () => {
    const life = kids.at(-1);
    await life.files.write("/root/disk.txt", "on disk");
    assert.equal(await life.pause({ keepMemory: false }), true);
    assert.equal((await life.getInfo()).state, "paused");
    await assert.rejects(life.commands.run("true"), "E2B: auto-resume refuses a filesystem-only pause");
    assert.equal((await life.getInfo()).state, "paused");
    const back = await Sandbox.connect(life.sandboxId, o({ timeoutMs: 600_000 }));
    assert.equal(await back.files.read("/root/disk.txt"), "on disk");
    if (atLeast("2.49.0")) {
      assert.equal(await back.pause(), true);
      await rejectsWith(Sandbox.connect(life.sandboxId, o({ onResume: "reboot" })), SandboxError, "onResume reboot of a memory pause",
        /memory: false/);
      assert.equal((await Sandbox.connect(life.sandboxId, o())).sandboxId, life.sandboxId);
    }
    assert.equal(await back.kill(), true);
  });

  test("lifecycle: older SDKs' routes (raw HTTP): POST /sandboxes, GET /sandboxes, /refreshes, /pause, /resume, /sandboxes/{id}/connect", { skip: !newest && "the raw routes do not depend on the SDK: run once, with the newest" }, async () => {
    const call = async (method, path, body) => {
      const res = await fetch(`${h.base}/e2b${path}`, {
        method,
        headers: { "X-API-KEY": h.e2bKey, "Content-Type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.text();
      return { status: res.status, body: text ? JSON.parse(text) : undefined };
    };
    const made = await call("POST", "/sandboxes", { templateID: "base", timeout: 600, metadata: { role: "v1" } });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const id = made.body.sandboxID;
    assert.ok(made.body.envdAccessToken);
    assert.deepEqual((await call("GET", "/sandboxes?metadata=" + encodeURIComponent("role=v1"))).body.map((s) => s.sandboxID), [id]);
    const endAt = async () => new Date((await call("GET", `/sandboxes/${id}`)).body.endAt);
    const first = await endAt();
    assert.equal((await call("POST", `/sandboxes/${id}/refreshes`, { duration: 600 })).status, 204);
    assert.ok((await endAt()) > first, "refresh extends the life");
    const extended = await endAt();
    assert.equal((await call("POST", `/sandboxes/${id}/refreshes`, { duration: 5 })).status, 204);
    assert.equal((await endAt()).getTime(), extended.getTime(), "refresh never shortens it");
    assert.equal((await call("POST", `/sandboxes/${id}/resume`, {})).status, 409, "resume of a running sandbox");
    assert.equal((await call("POST", `/sandboxes/${id}/pause`)).status, 204);
    const resumed = await call("POST", `/sandboxes/${id}/resume`, { timeout: 120, autoPause: true });
    assert.equal(resumed.status, 201, JSON.stringify(resumed.body));
    assert.equal((await call("GET", `/sandboxes/${id}`)).body.lifecycle.onTimeout, "pause");
    assert.equal((await call("POST", `/sandboxes/${id}/pause`)).status, 204);
    const woke = await call("POST", `/sandboxes/${id}/connect`, { timeout: 300 });
    assert.equal(woke.status, 201, "the v1 connect (e2b ≤ 2.50) resumes: " + JSON.stringify(woke.body));
    assert.equal((await call("POST", `/sandboxes/${id}/connect`, { timeout: 300 })).status, 200, "connect to a running sandbox");
    assert.equal((await call("DELETE", `/sandboxes/${id}`)).status, 204);
    assert.equal((await call("DELETE", `/sandboxes/${id}`)).status, 404);
    assert.equal((await call("POST", `/sandboxes/${id}/connect`, { timeout: 300 })).status, 404);
    assert.equal((await call("POST", "/sandboxes/x/timeout", { timeout: 0 })).status, 400);
  });

  test("lifecycle: errors: unknown sandbox, bad key, wrong template (and Template.exists), a user the template lacks", async () => {
    await rejectsWith(Sandbox.getInfo(unknownID, o()), SandboxNotFoundError, "getInfo");
    await rejectsWith(Sandbox.connect(unknownID, o()), SandboxNotFoundError, "connect");
    await rejectsWith(Sandbox.setTimeout(unknownID, 60_000, o()), SandboxNotFoundError, "setTimeout");
    await rejectsWith(Sandbox.pause(unknownID, o()), SandboxNotFoundError, "pause");
    assert.equal(await Sandbox.kill(unknownID, o()), false);
    await rejectsWith(Sandbox.getInfo("not a sandbox", o()), SandboxNotFoundError, "getInfo of a malformed id");
    const badKey = "e2b_" + "1".repeat(48);
    await rejectsWith(Sandbox.create("base", o({ apiKey: badKey })), AuthenticationError, "create with a bad key");
    await rejectsWith(Sandbox.list(o({ apiKey: badKey })).nextItems(), AuthenticationError, "list with a bad key");
    await rejectsWith(Sandbox.listSnapshots(o({ apiKey: badKey })).nextItems(), AuthenticationError, "listSnapshots with a bad key");
    await rejectsWith(Sandbox.create("no-such-template", o()), SandboxError, "create from an unknown template");
    assert.equal(await Template.exists("base", o()), true);
    assert.equal(await Template.exists("no-such-template", o()), false);
    await rejectsWith(Template.exists("base", o({ apiKey: badKey })), AuthenticationError, "Template.exists with a bad key");
    const list = (await h.zeish("GET", "/sandboxes")).body.sandboxes;
    assert.ok(list.every((s) => s.template === "base" || s.template === "debian"), "the refused create made no sandbox");
    await rejectsWith(sbx.commands.run("id", { user: "user" }), AuthenticationError, "run as a user the template lacks (envd: invalid username)");
    await rejectsWith(sbx.files.read("/etc/hostname", { user: "user" }), AuthenticationError, "read as a user the template lacks");
    // What zeish does not serve is a clear 501, never a 404 (which reads as "no such sandbox").
    await rejectsWith(sbx.updateNetwork({ denyOut: ["0.0.0.0/0"] }), SandboxError, "updateNetwork", /501: .*not served by zeish/);
  });
});
