// The console in real Chromium against a real zeishd with real VMs: sign
// in, create, terminal, files, snapshots, clones and lineage, delete, another
// account, and the refusals. Screenshots go to screenshots/.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { chromium } from "playwright-core";
import { Zeishd } from "./harness.mjs";

// Like the other VM tests: skip without QEMU or Chromium, except under CI.
const chromiumPath = process.env.CHROMIUM || "/usr/bin/chromium";
const missing = ["qemu-system-x86_64", "qemu-img"].filter((t) => spawnSync("sh", ["-c", `command -v ${t}`]).status !== 0);
if (!existsSync(chromiumPath)) missing.push(chromiumPath);
if (missing.length && process.env.CI) throw new Error(`CI is set, refusing to skip the browser test: missing ${missing.join(", ")}`);
const skip = missing.length ? `missing ${missing.join(", ")}` : false;

const shots = new URL("../screenshots/", import.meta.url).pathname;
mkdirSync(shots, { recursive: true });
const T = 180_000; // a VM boots in seconds, but the CPU is shared

let z, ctx, page, profile, failed = false;
const external = [];

before(async () => {
  if (skip) return;
  z = await Zeishd.start();
  profile = mkdtempSync(join(tmpdir(), "zeish-chromium-"));
  ctx = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
    viewport: { width: 1280, height: 800 },
    acceptDownloads: true,
  });
  // No external network: anything not to this zeishd is refused and reported.
  await ctx.route("**/*", (route) => {
    const u = new URL(route.request().url());
    if (u.host === `127.0.0.1:${z.port}`) return route.continue();
    external.push(u.href);
    return route.abort();
  });
  page = ctx.pages()[0] ?? await ctx.newPage();
  page.setDefaultTimeout(T);
  page.on("dialog", (d) => d.accept());
});

after(async () => {
  await ctx?.close();
  if (profile) rmSync(profile, { recursive: true, force: true });
  const left = await z?.stop(failed);
  assert.deepEqual(left ?? [], [], "VM processes left behind");
});

async function step(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    console.log(`step ${name}: ${Date.now() - t0} ms`);
  } catch (e) {
    failed = true;
    await page?.screenshot({ path: shots + "FAILED-" + name + ".png" }).catch(() => {});
    throw e;
  }
}

const shot = (name) => page.screenshot({ path: shots + name + ".png" });
const go = (hash) => page.goto(`${z.base}/console/${hash}`);
const rowOf = (name) => page.locator(`#sandboxes tr[data-name="${name}"]`);
const screenText = () => page.locator(".xterm-rows").innerText();

/** A `docker save` archive of a one-layer image, made with tar(1), in dir. */
function dockerArchive(dir) {
  const work = mkdtempSync(join(dir, "img-"));
  const root = join(work, "root");
  mkdirSync(join(root, "etc"), { recursive: true });
  writeFileSync(join(root, "etc", "greeting"), "hello from a layer\n");
  const layer = join(work, "layer.tar");
  const tar = (args) => {
    const r = spawnSync("tar", args);
    if (r.status !== 0) throw new Error(`tar ${args.join(" ")}: ${r.stderr}`);
  };
  tar(["-cf", layer, "-C", root, "."]);
  const diffID = "sha256:" + createHash("sha256").update(readFileSync(layer)).digest("hex");
  const config = { architecture: "amd64", os: "linux", config: { Env: ["GREETING=hi"], Cmd: ["/bin/sh"] }, rootfs: { type: "layers", diff_ids: [diffID] } };
  writeFileSync(join(work, "config.json"), JSON.stringify(config));
  writeFileSync(join(work, "manifest.json"), JSON.stringify([{ Config: "config.json", RepoTags: ["web-img:1"], Layers: ["layer.tar"] }]));
  const archive = join(work, "image.tar");
  tar(["-cf", archive, "-C", work, "manifest.json", "config.json", "layer.tar"]);
  return archive;
}

async function waitText(fn, want, what) {
  const deadline = Date.now() + T;
  for (;;) {
    const text = await fn();
    if (text.includes(want)) return text;
    if (Date.now() > deadline) throw new Error(`${what}: never showed ${JSON.stringify(want)}: ${JSON.stringify(text)}`);
    await page.waitForTimeout(200);
  }
}

test("the console end to end", { timeout: 15 * 60_000, skip }, async () => {
  let id;
  await step("signin", async () => {
    await go("");
    await page.waitForURL(/#\/login$/);
    await shot("01-login");
    await page.fill("#apikey", "zk_not-a-real-key");
    await page.press("#apikey", "Enter");
    await page.getByRole("alert").filter({ hasText: "unauthenticated" }).waitFor();
    await page.fill("#apikey", z.adminKey);
    await page.press("#apikey", "Enter");
    await page.waitForURL(/#\/sandboxes$/);
    const cookie = (await ctx.cookies()).find((c) => c.name === "zeish_session");
    assert.ok(cookie && cookie.httpOnly && cookie.sameSite === "Strict", `session cookie ${JSON.stringify(cookie)}`);
  });

  await step("create", async () => {
    await page.click("summary");
    await page.fill("#new-name", "web-1");
    await page.fill("#new-memory", "256");
    await page.fill("#new-env", "GREETING=hello");
    await page.click("#create");
    await rowOf("web-1").locator('[data-state="running"]').waitFor();
    id = await rowOf("web-1").getAttribute("data-id");
    await shot("02-sandboxes");
  });

  await step("overview", async () => {
    await rowOf("web-1").getByRole("link", { name: "web-1" }).click();
    await page.locator('[data-field="state"] [data-state="running"]').waitFor();
    assert.equal(await page.locator('[data-field="memory_mib"]').innerText(), "256");
    await shot("03-overview");
  });

  await step("terminal", async () => {
    await page.click("#tab-terminal");
    await waitText(() => page.locator("#term-status").innerText(), "Connected", "terminal status");
    await page.locator("#terminal").click();
    await page.keyboard.type("echo hi\n");
    // The answer is a line of its own ("echo hi" is the echo of the typing).
    const deadline = Date.now() + T;
    while (!(await screenText()).split("\n").some((l) => l.trim() === "hi")) {
      if (Date.now() > deadline) throw new Error("echo hi never answered: " + (await screenText()));
      await page.waitForTimeout(200);
    }
    await page.keyboard.type("stty size\n");
    const status = await page.locator("#term-status").innerText();
    const [, cols, rows] = status.match(/(\d+)×(\d+)/);
    await waitText(screenText, `${rows} ${cols}`, "stty size");
    await shot("04-terminal");
    // Leaving the tab detaches; coming back re-attaches to the same shell, with its scrollback.
    const pid = status.match(/pid (\d+)/)[1];
    await page.click("#tab-overview");
    await page.click("#tab-terminal");
    await waitText(() => page.locator("#term-status").innerText(), `Connected: pid ${pid},`, "re-attach");
    await waitText(screenText, `${rows} ${cols}`, "scrollback after re-attach");
  });

  await step("ports", async () => {
    // A server in the guest, started from the terminal: the Ports tab finds it
    // in the guest kernel's tables.
    await page.locator("#terminal").click();
    await page.keyboard.type("echo ported > /tmp/index.html && httpd -p 8080 -h /tmp && echo started\n");
    await waitText(screenText, "started", "httpd");
    await page.click("#tab-ports");
    await page.locator('#ports tr[data-port="8080"][data-listening="true"]').waitFor();
    await shot("04b-ports");
    // This zeishd gives sandboxes no network card: opening a port is refused in words.
    await page.locator('#ports tr[data-port="8080"]').getByRole("button", { name: "Make public" }).click();
    await page.getByRole("alert").filter({ hasText: "invalid_state" }).waitFor();
    assert.equal(await page.locator('#ports tr[data-port="8080"]').getAttribute("data-public"), "false");
  });

  await step("desktop-off", async () => {
    // This sandbox has no desktop: the tab says so in words.
    await page.click("#tab-desktop");
    await page.getByRole("alert").filter({ hasText: "desktop_not_enabled" }).waitFor();
  });

  const original = "hello from the browser\n";
  await step("files", async () => {
    await page.click("#tab-files");
    await page.locator("#files").waitFor();
    await page.setInputFiles("#upload", { name: "hello.txt", mimeType: "text/plain", buffer: Buffer.from(original) });
    const row = page.locator('#files tr[data-file="hello.txt"]');
    await row.waitFor();
    const [download] = await Promise.all([page.waitForEvent("download"), row.getByRole("button", { name: "Download" }).click()]);
    assert.equal(readFileSync(await download.path(), "utf8"), original);
    await shot("05-files");

    // Bad input: an upload over the console's limit is refused in words (by
    // the page, and by zeishd for a client that sends it anyway), and nothing is written.
    const big = join(profile, "big.bin");
    writeFileSync(big, Buffer.alloc((32 << 20) + 1));
    await page.setInputFiles("#upload", big);
    await page.getByRole("alert").filter({ hasText: "over the console's 32 MiB limit" }).waitFor();
    const cookie = (await ctx.cookies()).find((c) => c.name === "zeish_session").value;
    const res = await fetch(`${z.base}/console/api/sandboxes/${id}/files?path=/root/big.bin`, {
      method: "PUT", headers: { Cookie: "zeish_session=" + cookie, "X-Zeish-Console": "1" }, body: readFileSync(big),
    });
    const text = await res.text();
    assert.equal(res.status, 400, text);
    assert.match(text, /over the console's 32 MiB limit/);
    await page.click('button[type="submit"]');
    await row.waitFor();
    assert.equal(await page.locator('#files tr[data-file="big.bin"]').count(), 0);
  });

  await step("snapshots", async () => {
    await page.click("#tab-snapshots");
    await page.fill("#snap-name", "before");
    await page.click("#take-snapshot");
    await page.locator('#snapshots tr[data-snapshot="before"]').waitFor();
    // A rule's refusal, in words: the name is taken.
    await page.fill("#snap-name", "before");
    await page.click("#take-snapshot");
    await page.getByRole("alert").filter({ hasText: "name_taken" }).waitFor();

    // Change the file in the editor…
    await page.click("#tab-files");
    await page.locator('#files tr[data-file="hello.txt"]').getByRole("button", { name: "Edit" }).click();
    await page.fill("#editor", "changed\n");
    await page.click("#save");
    await page.locator("#editor").waitFor({ state: "detached" });
    await page.locator('#files tr[data-file="hello.txt"]').getByRole("button", { name: "Edit" }).click();
    assert.equal(await page.inputValue("#editor"), "changed\n");

    // …restore, and it is rolled back.
    await page.click("#tab-snapshots");
    await page.locator('#snapshots tr[data-snapshot="before"]').getByRole("button", { name: "Restore" }).click();
    await page.getByRole("status").filter({ hasText: "Restored before." }).waitFor();
    await shot("06-snapshots");
    await page.click("#tab-files");
    await page.locator('#files tr[data-file="hello.txt"]').getByRole("button", { name: "Edit" }).click();
    assert.equal(await page.inputValue("#editor"), original);
  });

  let children;
  await step("clone-lineage", async () => {
    await page.click("#tab-overview");
    await page.locator('[data-field="state"] [data-state="running"]').waitFor();
    await page.fill("#clone-count", "2");
    await page.click("#act-clone");
    await page.click("#tab-lineage");
    const kids = page.locator(`#lineage a[data-parent="${id}"]`);
    const deadline = Date.now() + T;
    while ((await kids.count()) !== 2) {
      if (Date.now() > deadline) throw new Error(`lineage has ${await kids.count()} children`);
      await page.waitForTimeout(250);
    }
    children = await kids.evaluateAll((els) => els.map((e) => e.getAttribute("data-node")));
    await page.locator(`#lineage a[data-parent="${id}"][data-state="running"]`).nth(1).waitFor();
    await shot("07-lineage");
    await page.locator(`#lineage a[data-node="${children[0]}"]`).click();
    await page.waitForURL(new RegExp(`#/sandboxes/${children[0]}/lineage$`));
  });

  await step("usage-account-templates", async () => {
    await go(`#/sandboxes/${id}/usage`);
    await page.locator("#usage dl").waitFor();
    await shot("08-usage");
    await go("#/templates");
    await page.locator("#templates").waitFor();
    await go("#/account");
    await page.locator("#new-key").waitFor();
    await shot("09-account");
  });

  await step("templates-build", async () => {
    // A template built from an uploaded image archive, its log followed live, then deleted.
    await go("#/templates");
    await page.click("summary");
    await page.fill("#tpl-name", "web-img");
    await page.setInputFiles("#tpl-file", dockerArchive(profile));
    await page.check("#tpl-cold");
    await page.click("#build");
    await page.locator('#templates tr[data-template="web-img"] [data-state="ready"]').waitFor();
    await waitText(() => page.locator("#build-log").innerText(), "state ready", "build log");
    assert.match(await page.locator("#build-log").innerText(), /step layer|layer 1\/1/);
    await shot("09b-templates");
    await page.locator('#templates tr[data-template="web-img"]').getByRole("button", { name: "Delete" }).click();
    await page.locator('#templates tr[data-template="web-img"]').waitFor({ state: "detached" });
    // A bad name is refused in words, and nothing is built.
    await page.fill("#tpl-name", "Bad_Name");
    await page.fill("#tpl-from", "registry:198.18.0.9/x:1");
    await page.evaluate(() => document.querySelector("#tpl-name").removeAttribute("pattern"));
    await page.setInputFiles("#tpl-file", []);
    await page.click("#build");
    await page.getByRole("alert").filter({ hasText: "invalid_argument" }).waitFor();
    assert.equal(await page.locator('#templates tr[data-template="Bad_Name"]').count(), 0);
    await go("#/account");
    await page.locator("#new-key").waitFor();
  });

  let otherKey;
  await step("keys", async () => {
    // An admin makes a key in the console; it is shown once and works.
    await page.click("#new-key");
    const key = await page.locator("#new-key-value").innerText();
    assert.match(key, /^zk_/);
    await z.api("GET", "/public/sandboxes", key);
    const acct = await z.api("POST", "/admin/accounts", z.adminKey, { name: "other" });
    otherKey = (await z.api("POST", `/admin/accounts/${acct.id}/keys`, z.adminKey, {})).key;
  });

  await step("phone", async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    await go("#/sandboxes");
    await rowOf("web-1").waitFor();
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `the page is ${overflow}px wider than a phone`);
    await shot("10-phone");
    await page.setViewportSize({ width: 1280, height: 800 });
    // Keyboard: a page puts focus on its content; Tab reaches the create
    // form, Enter opens it, Tab goes into it; Shift+Tab back to the header.
    await go("#/sandboxes");
    await rowOf("web-1").waitFor();
    const focused = () => page.evaluate(() => document.activeElement?.id || document.activeElement?.textContent);
    await page.keyboard.press("Tab");
    assert.equal(await focused(), "New sandbox");
    await page.keyboard.press("Enter");
    await page.keyboard.press("Tab");
    assert.equal(await focused(), "new-name");
    await page.keyboard.press("Shift+Tab");
    await page.keyboard.press("Shift+Tab");
    assert.equal(await focused(), "signout");
  });

  await step("delete", async () => {
    await go("#/sandboxes");
    for (const c of children) await page.locator(`#sandboxes tr[data-id="${c}"] input[type=checkbox]`).check();
    await page.click("#bulk-delete");
    for (const c of children) await page.locator(`#sandboxes tr[data-id="${c}"]`).waitFor({ state: "detached" });
    await go(`#/sandboxes/${id}/overview`);
    await page.locator('[data-field="state"] [data-state="running"]').waitFor();
    await page.click("#act-delete");
    await page.locator('[data-field="state"] [data-state="destroyed"]').waitFor();
    await shot("11-destroyed");
  });

  await step("refusals", async () => {
    const cookie = (await ctx.cookies()).find((c) => c.name === "zeish_session").value;
    const at = (path, init = {}) => fetch(z.base + path, init).then(async (r) => [r.status, await r.text()]);
    // A cross-site request with the real cookie: another Origin, or no console header.
    let [status, body] = await at("/console/api/v1/public/sandboxes", {
      method: "POST", headers: { Cookie: "zeish_session=" + cookie, Origin: "http://evil.example", "X-Zeish-Console": "1", "Content-Type": "application/json" }, body: "{}",
    });
    assert.equal(status, 403, body);
    assert.match(body, /"forbidden"/);
    [status, body] = await at("/console/api/v1/public/sandboxes", {
      method: "POST", headers: { Cookie: "zeish_session=" + cookie, "Content-Type": "application/json" }, body: "{}",
    });
    assert.equal(status, 403, body);
    [status, body] = await at("/console/api/v1/public/sandboxes", { headers: { Cookie: "zeish_session=" + cookie, "Sec-Fetch-Site": "cross-site" } });
    assert.equal(status, 403, body);
    // The same from inside the page without the header: refused too.
    status = await page.evaluate(async () => (await fetch("/console/api/v1/public/sandboxes", { method: "POST", body: "{}" })).status);
    assert.equal(status, 403);
    assert.equal((await z.api("GET", "/public/sandboxes", z.adminKey)).sandboxes.length, 0, "a refused request created a sandbox");

    // A forged session cookie: refused, and the console goes to sign-in.
    [status, body] = await at("/console/api/session", { headers: { Cookie: "zeish_session=forged" } });
    assert.equal(status, 401, body);
    assert.match(body, /"unauthenticated"/);
    await ctx.clearCookies();
    await ctx.addCookies([{ name: "zeish_session", value: "forged", url: z.base + "/console" }]);
    await go("#/sandboxes");
    await page.waitForURL(/#\/login$/);
  });

  await step("another-account", async () => {
    await page.fill("#apikey", otherKey);
    await page.press("#apikey", "Enter");
    await page.waitForURL(/#\/sandboxes$/);
    await page.locator("#sandboxes td.note").filter({ hasText: "No sandboxes." }).waitFor();
    await go(`#/sandboxes/${id}/overview`);
    await page.getByRole("alert").filter({ hasText: "not_found" }).first().waitFor();
    const status = await page.evaluate(async (sid) => (await fetch(`/console/api/v1/public/sandboxes/${sid}/lineage`)).status, id);
    assert.equal(status, 404);
    await page.click("#signout");
    await page.waitForURL(/#\/login$/);
    const after = await page.evaluate(async () => (await fetch("/console/api/session")).status);
    assert.equal(after, 401);
  });

  assert.deepEqual(external, [], "the console reached outside zeishd");
});
