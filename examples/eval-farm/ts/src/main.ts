// eval-farm: the fan-out workflow. Prepare a baseline sandbox once (a script
// and its data in /root, run once to warm up), snapshot it, fork it N times
// while it runs, run one trial per fork in parallel, print a table, delete
// the forks, and finally the baseline (unless --keep).
//
//   ZEISH_API_URL=… ZEISH_API_KEY=… node dist/main.js [N] [--keep] [--json]
//
// N comes from the first argument, else EVAL_FARM_CLONES, else 3.
import { Sandbox, Zeish, ZeishError, type ExecResult } from "@zeish/sdk";

interface TrialResult {
  index: number;
  id: string;
  name: string;
  hostname: string;
  exitCode: number;
  score: number | null;
  ms: number;
  output: string;
}

const TRIAL_SCRIPT = `#!/bin/sh
# trial.sh INDEX: one evaluation run; prints key=value pairs, the last is the score.
set -e
i=\${1:-0}
warm=$(cat /root/eval/warm.txt)
sum=0
while read -r x; do sum=$((sum + x * (i + 1))); done < /root/eval/data.txt
echo "trial=$i host=$(hostname) warm=$warm score=$(( (sum + i * 17) % 100 ))"
`;

function parseArgs(argv: string[]): { n: number; keep: boolean; json: boolean } {
  const flags = new Set(argv.filter((a) => a.startsWith("--")));
  for (const f of flags) {
    if (f !== "--keep" && f !== "--json") throw new Error(`unknown flag ${f} (want [N] [--keep] [--json])`);
  }
  const pos = argv.find((a) => !a.startsWith("--")) ?? process.env.EVAL_FARM_CLONES ?? "3";
  const n = Number(pos);
  if (!Number.isInteger(n) || n < 1 || n > 16) throw new Error(`N must be 1..16, got ${pos}`);
  return { n, keep: flags.has("--keep"), json: flags.has("--json") };
}

function log(msg: string): void {
  console.error(`[eval-farm] ${msg}`);
}

async function timed<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const t = Date.now();
  const v = await fn();
  return [v, Date.now() - t];
}

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  return rows.map((r) => r.map((cell, c) => cell.padEnd(widths[c]!)).join("  ").trimEnd()).join("\n");
}

async function main(): Promise<number> {
  const { n, keep, json } = parseArgs(process.argv.slice(2));
  const zeish = new Zeish();
  const memoryMib = Number(process.env.EVAL_FARM_MEMORY_MIB ?? 256);
  let baseline: Sandbox | undefined;
  let clones: Sandbox[] = [];
  const t0 = Date.now();
  try {
    // 1. Baseline: boot, install the trial and its data, warm it up.
    const [b, bootMs] = await timed(() => Sandbox.create({ memoryMib, metadata: { role: "eval-baseline" } }, { zeish }));
    baseline = b;
    log(`baseline ${b.name} (${b.id}) running after ${bootMs} ms`);
    await b.files.mkdir("/root/eval", { parents: true });
    await b.files.write("/root/eval/data.txt", Array.from({ length: 50 }, (_, i) => String((i * 37) % 101)).join("\n") + "\n");
    await b.files.write("/root/eval/trial.sh", TRIAL_SCRIPT, { mode: 0o755 });
    const warm = await b.exec("echo ready-$(date +%s) > /root/eval/warm.txt && /root/eval/trial.sh 0");
    if (warm.exitCode !== 0) throw new Error(`warm-up failed (${warm.exitCode}): ${warm.stderr}`);
    log(`warm-up: ${warm.stdout.trim()}`);

    // 2. Snapshot the prepared state (kept with the baseline, for rollbacks).
    const snap = await b.snapshots.create({ name: "prepared" });
    log(`snapshot ${snap.name} (${snap.id})`);

    // 3. Fork it N times while it runs.
    const [clone, cloneMs] = await timed(() => b.clone({ count: n }));
    clones = clone.sandboxes;
    log(`${n} clone(s) running after ${cloneMs} ms; baseline paused ${clone.pauseMs} ms`);

    // 4. One trial per clone, in parallel.
    const results: TrialResult[] = await Promise.all(clones.map(async (c, index): Promise<TrialResult> => {
      let r: ExecResult;
      let ms: number;
      try {
        [r, ms] = await timed(() => c.exec(["/root/eval/trial.sh", String(index)], { env: { TRIAL: String(index) }, timeoutSeconds: 120 }));
      } catch (err) {
        return { index, id: c.id, name: c.name, hostname: c.info.hostname, exitCode: -1, score: null, ms: 0, output: String(err) };
      }
      const m = /score=(\d+)/.exec(r.stdout);
      return {
        index, id: c.id, name: c.name, hostname: c.info.hostname, exitCode: r.exitCode,
        score: m ? Number(m[1]) : null, ms, output: (r.stdout + r.stderr).trim(),
      };
    }));

    // 5. Report.
    const rows = [["#", "clone", "id", "exit", "score", "ms", "output"]];
    for (const r of results) {
      rows.push([String(r.index), r.name, r.id, String(r.exitCode), r.score === null ? "-" : String(r.score), String(r.ms), r.output]);
    }
    console.log(table(rows));
    const scored = results.filter((r) => r.score !== null);
    const best = scored.sort((a, b) => b.score! - a.score!)[0];
    console.log(`baseline boot ${bootMs} ms, clone x${n} ${cloneMs} ms (parent paused ${clone.pauseMs} ms)` +
      (best ? `, best: clone #${best.index} score ${best.score}` : ""));

    // 6. Delete the clones; keep the baseline until the end.
    await Promise.all(clones.map((c) => c.delete()));
    clones = [];
    if (keep) {
      log(`keeping baseline ${b.id} and snapshot ${snap.id} (--keep)`);
    } else {
      await b.delete();
      baseline = undefined;
    }
    if (json) {
      console.log(JSON.stringify({ clones: n, bootMs, cloneMs, pauseMs: clone.pauseMs, totalMs: Date.now() - t0, results }));
    }
    return results.every((r) => r.exitCode === 0 && r.score !== null) ? 0 : 1;
  } finally {
    // On failure, leave nothing running (the baseline too, unless --keep).
    await Promise.all(clones.map((c) => c.delete().catch((e) => log(`deleting ${c.id}: ${e}`))));
    if (baseline && !keep) await baseline.delete().catch((e) => log(`deleting ${baseline!.id}: ${e}`));
  }
}

main().then(
  (code) => process.exit(code),
  (err) => {
    if (err instanceof ZeishError) log(`error ${err.status} ${err.code}: ${err.message}`);
    else log(String(err?.stack ?? err));
    process.exit(1);
  },
);
