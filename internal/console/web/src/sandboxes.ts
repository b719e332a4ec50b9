import { explain, money, pub, type Sandbox } from "./api";
import { h, replace, stateBadge, errorBox, toast } from "./dom";
import type { Cleanup } from "./main";

function parseEnv(text: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of text.split("\n")) {
    const t = line.trim();
    if (!t) continue;
    const i = t.indexOf("=");
    if (i <= 0) throw new Error(`env line "${t}": want KEY=VALUE`);
    env[t.slice(0, i)] = t.slice(i + 1);
  }
  return env;
}

export function sandboxesPage(main: HTMLElement): Cleanup {
  const selected = new Set<string>();
  const msg = h("div");
  const body = h("tbody");
  const filterText = h("input", { id: "filter", type: "search", placeholder: "filter by name or id", "aria-label": "Filter" });
  const filterState = h("select", { id: "filter-state", "aria-label": "State" },
    ...["all", "running", "paused", "stopped", "starting", "error", "destroyed"].map((s) => h("option", { value: s }, s)));
  const bulk = h("button", { id: "bulk-delete", class: "danger", disabled: true }, "Delete selected");
  let list: Sandbox[] = [];

  const draw = () => {
    const q = filterText.value.trim().toLowerCase();
    const st = filterState.value;
    const rows = list.filter((s) => (st === "all" || s.state === st) && (!q || s.name.toLowerCase().includes(q) || s.id.includes(q)));
    replace(body, rows.length === 0 ? h("tr", {}, h("td", { colspan: 8, class: "note" }, "No sandboxes.")) : rows.map((s) => {
      const box = h("input", {
        type: "checkbox", "aria-label": "Select " + s.name, checked: selected.has(s.id),
        onchange: (ev: Event) => {
          if ((ev.target as HTMLInputElement).checked) selected.add(s.id);
          else selected.delete(s.id);
          bulk.disabled = selected.size === 0;
        },
      });
      return h("tr", { "data-id": s.id, "data-name": s.name },
        h("td", {}, box),
        h("td", {}, h("a", { href: `#/sandboxes/${s.id}/overview` }, s.name), h("div", { class: "note hide-narrow" }, s.id)),
        h("td", {}, stateBadge(s.state)),
        h("td", { class: "hide-narrow" }, s.template),
        h("td", { class: "hide-narrow" }, `${s.vcpus} vCPU · ${s.memory_mib} MiB`),
        h("td", {}, money(s.cost_micros)),
        h("td", { class: "hide-narrow" }, s.parent_id ? h("a", { href: `#/sandboxes/${s.parent_id}/overview` }, s.parent_id) : "—"));
    }));
    bulk.disabled = selected.size === 0;
  };
  const load = async () => {
    try {
      list = (await pub<{ sandboxes: Sandbox[] }>("GET", "/sandboxes?include_destroyed=" + (filterState.value === "destroyed"))).sandboxes;
      draw();
    } catch (e) {
      replace(msg, errorBox(explain(e)));
    }
  };
  filterText.oninput = draw;
  filterState.onchange = () => void load();
  bulk.onclick = async () => {
    if (!confirm(`Delete ${selected.size} sandbox(es)? Their disks and memory are gone for good.`)) return;
    for (const id of [...selected]) {
      try {
        await pub("DELETE", `/sandboxes/${id}`);
        selected.delete(id);
      } catch (e) {
        replace(msg, errorBox(explain(e)));
      }
    }
    toast("Deleting.");
    void load();
  };

  const name = h("input", { id: "new-name", placeholder: "optional", pattern: "[a-z0-9-]*" });
  const template = h("input", { id: "new-template", value: "base" });
  const size = h("select", { id: "new-size" }, h("option", { value: "" }, "default"), ...["small", "medium", "large"].map((s) => h("option", { value: s }, s)));
  const mem = h("input", { id: "new-memory", type: "number", min: 128, step: 128, placeholder: "MiB" });
  const env = h("textarea", { id: "new-env", rows: 2, placeholder: "KEY=VALUE per line", style: "min-height:3rem" });
  const git = h("input", { id: "new-git", placeholder: "https://…" });
  const browser = h("input", { type: "checkbox", id: "new-browser" });
  const desktop = h("input", { type: "checkbox", id: "new-desktop" });
  const create = h("form", {
    class: "row", id: "create-form", onsubmit: async (ev: Event) => {
      ev.preventDefault();
      try {
        const req: Record<string, unknown> = { template: template.value.trim() || "base" };
        if (name.value) req.name = name.value.trim();
        if (size.value) req.size = size.value;
        if (mem.value) req.memory_mib = Number(mem.value);
        const e = parseEnv(env.value);
        if (Object.keys(e).length) req.env = e;
        if (git.value) req.git_repo = git.value.trim();
        if (browser.checked) req.browser = true;
        if (desktop.checked) req.desktop = true;
        const sb = await pub<Sandbox>("POST", "/sandboxes", req);
        toast(`Creating ${sb.name}…`);
        replace(msg);
        void load();
      } catch (e) {
        replace(msg, errorBox(explain(e)));
      }
    },
  },
  h("label", {}, "Name", name), h("label", {}, "Template", template), h("label", {}, "Size", size),
  h("label", {}, "Memory", mem), h("label", {}, "Env", env), h("label", {}, "Git repo", git),
  h("label", {}, "Browser", browser), h("label", {}, "Desktop", desktop),
  h("button", { class: "primary", type: "submit", id: "create" }, "Create sandbox"));

  replace(main,
    h("h1", {}, "Sandboxes"),
    h("details", {}, h("summary", {}, "New sandbox"), create),
    msg,
    h("div", { class: "row" }, filterText, filterState, bulk),
    h("div", { class: "scroll" }, h("table", { id: "sandboxes" },
      h("thead", {}, h("tr", {}, h("th", {}, ""), h("th", {}, "Name"), h("th", {}, "State"), h("th", { class: "hide-narrow" }, "Template"),
        h("th", { class: "hide-narrow" }, "Size"), h("th", {}, "Cost"), h("th", { class: "hide-narrow" }, "Parent"))),
      body)));
  void load();
  const timer = setInterval(() => void load(), 2000);
  return () => clearInterval(timer);
}
