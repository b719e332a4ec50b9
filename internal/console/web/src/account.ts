import { call, explain, money, pub, type APIKey, type Session, type UsageReport } from "./api";
import { h, replace, errorBox } from "./dom";
import type { Cleanup } from "./main";

export function templatesPage(main: HTMLElement): Cleanup {
  const out = h("div");
  replace(main, h("h1", {}, "Templates"), out);
  pub<{ templates: { name: string; [k: string]: unknown }[] }>("GET", "/templates").then((r) => {
    replace(out, h("table", { id: "templates" }, h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th", {}, "Details"))),
      h("tbody", {}, r.templates.map((t) => h("tr", {}, h("td", {}, t.name), h("td", { class: "note" }, JSON.stringify(t)))))));
  }).catch(() => {
    replace(out, h("table", { id: "templates" }, h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th", {}, "Details"))),
      h("tbody", {}, h("tr", {}, h("td", {}, "base"), h("td", { class: "note" }, "Built in: Debian's cloud kernel, a busybox userland and the sandboxd agent.")))));
  });
  return () => {};
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
