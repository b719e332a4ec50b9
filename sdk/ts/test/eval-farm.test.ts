// Runs examples/eval-farm/ts (built by `make test-ts`) with N = 3 against a
// real zeishd: one baseline boot, a snapshot, three forks, three trials.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Harness, repoRoot, vmSkipReason } from "./harness.js";

const main = join(repoRoot(), "examples", "eval-farm", "ts", "dist", "main.js");
let skip: string | undefined = vmSkipReason();
if (!skip && !existsSync(main)) {
  const msg = `${main} is not built (cd examples/eval-farm/ts && npm ci && npm run build; \`make test-ts\` does it)`;
  if (process.env.CI) throw new Error(msg);
  skip = msg;
}

describe("examples/eval-farm/ts", { skip, timeout: 20 * 60_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await Harness.start();
  });
  after(async () => {
    await h?.stop();
  });

  test("N = 3: every clone runs its trial, nothing is left behind", async () => {
    const t0 = Date.now();
    const child = spawn(process.execPath, [main, "3", "--json"], { env: h.clientEnv(), stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (b: Buffer) => {
      out += b.toString();
      process.stdout.write(b);
    });
    child.stderr.on("data", (b: Buffer) => process.stdout.write(b));
    const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
    try {
      assert.equal(code, 0, "eval-farm exited non-zero");
      const summary = JSON.parse(out.trim().split("\n").pop()!) as {
        clones: number; results: { index: number; id: string; hostname: string; exitCode: number; score: number | null; output: string }[];
      };
      assert.equal(summary.clones, 3);
      assert.equal(summary.results.length, 3);
      assert.deepEqual(summary.results.map((r) => r.index), [0, 1, 2]);
      assert.equal(new Set(summary.results.map((r) => r.id)).size, 3);
      for (const r of summary.results) {
        assert.equal(r.exitCode, 0, r.output);
        assert.equal(typeof r.score, "number", r.output);
        // The trial ran in the fork (its own hostname) on the baseline's warmed-up state.
        assert.match(r.output, new RegExp(`^trial=${r.index} host=${r.hostname} warm=ready-\\d+ score=\\d+$`));
      }
      assert.match(out, /clone x3/);
      assert.deepEqual(await h.zeish.listSandboxes(), [], "the example left sandboxes behind");
      console.log(`eval-farm N=3: ${Date.now() - t0} ms`);
    } catch (err) {
      h.failed = true;
      throw err;
    }
  });
});
