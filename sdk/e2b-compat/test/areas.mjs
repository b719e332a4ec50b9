// A node:test reporter: counts the tests of a run by area (the "<area>: "
// that starts each test's name in e2b.test.mjs) and writes one JSON object,
// {areas: {area: {passed, failed, skipped}}, failures: [{name, error}]},
// for run.mjs's table.
export default async function* areas(source) {
  const out = { areas: {}, failures: [] };
  for await (const event of source) {
    if (event.type !== "test:pass" && event.type !== "test:fail") continue;
    const { name, details, skip, todo } = event.data;
    if (details?.type === "suite") {
      // A suite fails alone only when a hook did: its tests say which.
      if (event.type === "test:fail") out.failures.push({ name, error: String(details?.error?.cause ?? details?.error ?? "") });
      continue;
    }
    const area = /^([a-z ]+): /.exec(name)?.[1] ?? "other";
    const n = (out.areas[area] ??= { passed: 0, failed: 0, skipped: 0 });
    if (skip || todo) n.skipped++;
    else if (event.type === "test:pass") n.passed++;
    else {
      n.failed++;
      out.failures.push({ name, error: String(details?.error?.cause ?? details?.error ?? "").slice(0, 2000) });
    }
  }
  yield JSON.stringify(out) + "\n";
}
