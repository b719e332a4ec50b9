import { call, explain, money, pub, type APIKey, type Session, type UsageReport } from "./api";
import { h, replace, errorBox, stateBadge } from "./dom";
import type { Cleanup } from "./main";

interface Template {
  id: string; name: string; builtin: boolean; state: string; state_reason?: string; source?: string;
  disk_mib: number; warm?: { memory_mib: number; build_ms: number }; created_at: string; [k: string]: unknown;
}
interface TemplateEvent { type: "progress" | "log" | "state"; message?: string; progress?: { step: string; layer?: number; layers?: number; bytes?: number; total?: number }; template?: Template }

const words = (s: string) => s.trim() ? s.trim().split(/\s+/) : undefined;

/** Templates: the list, a build from an uploaded image archive or a registry, its live log, delete. */
export function templatesPage(main: HTMLElement): Cleanup {
  const out = h("div");
  const msg = h("div");
  const log = h("pre", { id: "build-log", class: "log", "aria-live": "polite" });
  let es: EventSource | undefined;
  const name = h("input", { id: "tpl-name", required: true, pattern: "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", placeholder: "my-image" });
  const file = h("input", { id: "tpl-file", type: "file", accept: ".tar,application/x-tar" }) as HTMLInputElement;
  const from = h("input", { id: "tpl-from", placeholder: "registry:host/repo:tag (or upload an archive)", size: 40 });
  const start = h("input", { id: "tpl-start", placeholder: "e.g. python3 -m http.server 8000" });
  const ready = h("input", { id: "tpl-ready", placeholder: "e.g. curl -sf localhost:8000" });
  const disk = h("input", { id: "tpl-disk", type: "number", min: 64, value: 1024, style: "width:6rem" });
  const cold = h("input", { id: "tpl-cold", type: "checkbox" });
  const follow = (t: Template) => {
    es?.close();
    replace(log);
    const line = (s: string) => { log.append(s + "\n"); log.scrollTop = log.scrollHeight; };
    es = new EventSource(`/console/api/v1/public/templates/${t.id}/events`);
    for (const type of ["progress", "log", "state"]) {
      es.addEventListener(type, (ev) => {
        const e = JSON.parse((ev as MessageEvent).data) as TemplateEvent;
        if (e.type === "progress" && e.progress) {
          const p = e.progress;
          line(p.step === "layer" ? `layer ${p.layer}/${p.layers}: ${p.bytes ?? 0} of ${p.total ?? "?"} bytes` : `step ${p.step}`);
        } else if (e.type === "log") {
          line(e.message ?? "");
        } else if (e.template) {
          line(`state ${e.template.state}${e.template.state_reason ? ": " + e.template.state_reason : ""}`);
          if (e.template.state !== "building") {
            replace(msg, h("p", { role: "status" }, `${e.template.name}: ${e.template.state}${e.template.state_reason ? " (" + e.template.state_reason + ")" : ""}`));
            es?.close();
            load();
          }
        }
      });
    }
  };
  const load = () => pub<{ templates: Template[] }>("GET", "/templates").then((r) => {
    replace(out, h("table", { id: "templates" },
      h("thead", {}, h("tr", {}, ["Name", "State", "Source", "Disk", "Warm", ""].map((c) => h("th", {}, c)))),
      h("tbody", {}, r.templates.map((t) => h("tr", { "data-template": t.name },
        h("td", {}, t.name, t.builtin ? h("span", { class: "note" }, " (built in)") : ""),
        h("td", {}, stateBadge(t.state), t.state_reason ? h("span", { class: "note" }, " " + t.state_reason) : ""),
        h("td", { class: "note" }, t.source ?? ""),
        h("td", {}, `${t.disk_mib} MiB`),
        h("td", {}, t.warm ? `${t.warm.memory_mib} MiB, built in ${(t.warm.build_ms / 1000).toFixed(1)} s` : "cold"),
        h("td", {},
          t.id ? h("button", { onclick: () => follow(t) }, "Log") : "",
          t.builtin ? "" : h("button", {
            class: "danger", onclick: async () => {
              if (!confirm(`Delete template ${t.name}? Sandboxes made from it keep working.`)) return;
              try {
                await pub("DELETE", `/templates/${t.id}`);
                load();
              } catch (e) { replace(msg, errorBox(explain(e))); }
            },
          }, "Delete")))))));
  }).catch((e) => replace(out, errorBox(explain(e))));
  const build = async (ev: Event) => {
    ev.preventDefault();
    replace(msg);
    const spec: Record<string, unknown> = { name: name.value.trim(), from: from.value.trim(), disk_mib: Number(disk.value) };
    if (words(start.value)) spec.start_cmd = ["sh", "-c", start.value.trim()];
    if (words(ready.value)) spec.ready_cmd = ["sh", "-c", ready.value.trim()];
    if (cold.checked) spec.cold = true;
    try {
      let t: Template;
      const f = file.files?.[0];
      if (f) {
        // Streamed as multipart: spec first, then the archive.
        spec.from = spec.from || (f.name.endsWith(".oci.tar") ? "oci-archive" : "docker-archive");
        const form = new FormData();
        form.append("spec", new Blob([JSON.stringify(spec)], { type: "application/json" }));
        form.append("image", f);
        const res = await fetch("/console/api/v1/public/templates", { method: "POST", credentials: "same-origin", headers: { "X-Zeish-Console": "1" }, body: form });
        if (!res.ok) {
          const body = await res.json().catch(() => ({})) as { error?: { code: string; message: string } };
          throw new Error(body.error ? `${body.error.message} (${body.error.code})` : `HTTP ${res.status}`);
        }
        t = await res.json() as Template;
      } else {
        t = await pub<Template>("POST", "/templates", spec);
      }
      replace(msg, h("p", { role: "status" }, `Building ${t.name}…`));
      load();
      follow(t);
    } catch (e) {
      replace(msg, errorBox(explain(e)));
    }
  };
  replace(main, h("h1", {}, "Templates"), out,
    h("details", {}, h("summary", {}, "Build a template from an image"),
      h("form", { id: "build-template", class: "row", onsubmit: build },
        h("label", {}, "Name ", name),
        h("label", {}, "Image archive (docker save or OCI, .tar) ", file),
        h("label", {}, "or from ", from),
        h("label", {}, "Start command ", start),
        h("label", {}, "Ready command ", ready),
        h("label", {}, "Disk (MiB) ", disk),
        h("label", {}, cold, " Cold (save no booted machine)"),
        h("button", { id: "build", type: "submit" }, "Build"))),
    msg, h("h2", {}, "Build log"), log);
  load();
  return () => es?.close();
}

export function accountPage(main: HTMLElement, session: Session): Cleanup {
  const usage = h("div");
  const keys = h("div", { id: "keys" });
  const a = session.account;
  replace(main,
    h("h1", {}, "Account"),
    h("dl", { class: "fields" }, h("dt", {}, "Name"), h("dd", {}, a.name), h("dt", {}, "Id"), h("dd", {}, a.id),
      h("dt", {}, "Admin"), h("dd", {}, a.admin ? "yes" : "no")),
    h("h2", {}, "Quotas"),
    h("dl", { class: "fields" },
      h("dt", {}, "Running slots"), h("dd", {}, String(session.plan.running_slots)),
      h("dt", {}, "Creates per minute"), h("dd", {}, String(session.plan.creates_per_minute)),
      h("dt", {}, "Creates per day"), h("dd", {}, String(session.plan.daily_creates))),
    h("h2", {}, "Usage (this month)"), usage,
    h("h2", {}, "API keys"), keys);
  pub<UsageReport>("GET", "/usage").then((r) => replace(usage, h("dl", { class: "fields" },
    h("dt", {}, "Cost"), h("dd", {}, money(r.total.cost_micros)),
    h("dt", {}, "Running"), h("dd", {}, `${Math.round(r.total.running_seconds)} s`),
    h("dt", {}, "Sandboxes"), h("dd", {}, String(r.sandboxes.length))))).catch((e) => replace(usage, errorBox(explain(e))));
  const loadKeys = async () => {
    if (!a.admin) {
      replace(keys, h("p", { class: "note" }, "API keys are made and revoked by an admin."));
      return;
    }
    try {
      const list = (await call<{ keys: APIKey[] }>("GET", "/v1/admin/keys")).keys.filter((k) => k.account_id === a.id);
      const shown = h("div");
      replace(keys,
        h("button", {
          id: "new-key", onclick: async () => {
            try {
              const k = await call<{ key: string }>("POST", `/v1/admin/accounts/${a.id}/keys`, {});
              await loadKeys();
              keys.prepend(h("div", { class: "error", role: "alert", style: "border-color:#3fb950;color:inherit" },
                "New key (shown once, copy it now): ", h("code", { id: "new-key-value" }, k.key)));
            } catch (e) {
              replace(shown, errorBox(explain(e)));
            }
          },
        }, "Create key"), shown,
        h("table", {}, h("tbody", {}, list.map((k) => h("tr", {},
          h("td", {}, h("code", {}, k.prefix + "…")), h("td", { class: "note" }, k.id),
          h("td", {}, k.revoked_at ? "revoked" : h("button", {
            class: "danger", onclick: async () => {
              if (!confirm(`Revoke ${k.prefix}…? Programs and sessions using it stop working.`)) return;
              await call("DELETE", `/v1/admin/keys/${k.id}`).catch((e) => replace(shown, errorBox(explain(e))));
              void loadKeys();
            },
          }, "Revoke")))))));
    } catch (e) {
      replace(keys, errorBox(explain(e)));
    }
  };
  void loadKeys();
  return () => {};
}
