// Runs the E2B suite (e2b.test.mjs) once for each pinned e2b SDK (the
// e2b-<major>-<minor> aliases of package.json; E2B_VERSIONS=2.45.0,2.51.0
// picks some), one after the other, then prints a table of each version's
// passed, failed and skipped tests by area and its wall time. Exits 1 if any
// test failed.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { sdkPackages } from "./harness.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const areaOrder = ["lifecycle", "commands", "files", "pty", "watch", "git", "snapshots and fork", "metrics", "signing"];
const only = process.env.E2B_VERSIONS?.split(",").map((v) => v.trim()).filter(Boolean);
const packages = sdkPackages().filter((p) => !only || only.includes(p.version));
if (packages.length === 0) throw new Error(`no e2b SDK to run: E2B_VERSIONS=${process.env.E2B_VERSIONS}`);

const tmp = mkdtempSync(join(tmpdir(), "e2b-compat-"));
const results = [];
for (const p of packages) {
  const summary = join(tmp, `${p.name}.json`);
  console.log(`\n=== e2b ${p.version} (${p.name})`);
  const start = Date.now();
  const code = await new Promise((resolve) => {
    const child = spawn(process.execPath, ["--test", "--test-concurrency=1",
      "--test-reporter=spec", "--test-reporter-destination=stdout",
      `--test-reporter=${join(here, "areas.mjs")}`, `--test-reporter-destination=${summary}`,
      join(here, "e2b.test.mjs")], { env: { ...process.env, E2B_SDK: p.name }, stdio: "inherit" });
    child.on("exit", (c, sig) => resolve(c ?? (sig ? 1 : 0)));
  });
  let s = { areas: {}, failures: [] };
  try {
    s = JSON.parse(readFileSync(summary, "utf8"));
  } catch (err) {
    s.failures.push({ name: "(the run)", error: `no summary: ${err.message}` });
  }
  results.push({ ...p, seconds: (Date.now() - start) / 1000, code, ...s });
}
rmSync(tmp, { recursive: true, force: true });

const cell = (n) => (n ? `${n.passed}/${n.failed}` + (n.skipped ? ` (${n.skipped} skipped)` : "") : "-");
console.log("\npassed/failed by area:\n");
console.log(`| e2b | ${areaOrder.join(" | ")} | wall time |`);
console.log(`|---|${areaOrder.map(() => "---").join("|")}|---|`);
for (const r of results) {
  console.log(`| ${r.version} | ${areaOrder.map((a) => cell(r.areas[a])).join(" | ")} | ${r.seconds.toFixed(0)} s |`);
}
let failed = false;
for (const r of results) {
  const others = Object.keys(r.areas).filter((a) => !areaOrder.includes(a));
  if (others.length) console.log(`e2b ${r.version}: tests outside the areas: ${others.join(", ")}`);
  for (const f of r.failures) console.log(`FAIL e2b ${r.version}: ${f.name}: ${f.error}`);
  failed ||= r.code !== 0 || r.failures.length > 0;
}
process.exit(failed ? 1 : 0);
