import { Terminal } from "@xterm/xterm";
import { access, data, explain, money, pub, upload, type FileInfo, type Lineage, type LineageEntry, type Sandbox, type Snapshot, type UsageReport } from "./api";
import { h, replace, stateBadge, errorBox, toast, svg } from "./dom";
import type { Cleanup } from "./main";

const MAX_UPLOAD = 32 << 20;
const TABS = ["overview", "terminal", "files", "snapshots", "lineage", "ports", "desktop", "usage"] as const;

export function detailPage(main: HTMLElement, id: string, tab: string): Cleanup {
  const title = h("h1", {}, id);
  const state = h("span");
  const panel = h("section", { id: "panel", "aria-live": "polite" });
  replace(main,
    h("p", {}, h("a", { href: "#/sandboxes" }, "← Sandboxes")),
    h("div", { class: "row" }, title, state),
    h("nav", { class: "tabs", "aria-label": "Sandbox" }, TABS.map((t) =>
      h("a", { href: `#/sandboxes/${id}/${t}`, "aria-current": t === tab ? "page" : undefined, id: "tab-" + t }, t[0]!.toUpperCase() + t.slice(1)))),
    panel);
  pub<Sandbox>("GET", `/sandboxes/${id}`).then((sb) => {
    title.textContent = sb.name;
    replace(state, stateBadge(sb.state));
  }).catch((e) => replace(panel, errorBox(explain(e))));
  const pages: Record<string, (p: HTMLElement, id: string, onState: (s: Sandbox) => void) => Cleanup> = {
    overview, terminal, files, snapshots, lineage, ports, desktop, usage,
  };
  return (pages[tab] ?? overview)(panel, id, (sb) => {
    title.textContent = sb.name;
    replace(state, stateBadge(sb.state));
  });
}

function overview(p: HTMLElement, id: string, onState: (s: Sandbox) => void): Cleanup {
  const fields = h("dl", { class: "fields", id: "fields" });
  const msg = h("div");
  const count = h("input", { id: "clone-count", type: "number", min: 1, max: 16, value: 1, style: "width:4rem", "aria-label": "Clone count" });
  const act = (label: string, fn: () => Promise<unknown>, danger = false, confirmText?: string) =>
    h("button", {
      id: "act-" + label.toLowerCase().replace(/\W+/g, "-"), class: danger ? "danger" : undefined, onclick: async () => {
        if (confirmText && !confirm(confirmText)) return;
        try {
          await fn();
          replace(msg);
        } catch (e) {
          replace(msg, errorBox(explain(e)));
        }
      },
    }, label);
  const show = (sb: Sandbox) => {
    onState(sb);
    replace(fields, Object.entries(sb).flatMap(([k, v]) => [
      h("dt", {}, k),
      h("dd", { "data-field": k }, k === "state" ? stateBadge(String(v)) : k === "cost_micros" ? money(Number(v))
        : k === "parent_id" && v ? h("a", { href: `#/sandboxes/${v}/overview` }, String(v))
        : typeof v === "object" ? JSON.stringify(v) : String(v)),
    ]));
  };
  replace(p,
    h("div", { class: "row" },
      act("Pause", () => pub("POST", `/sandboxes/${id}/pause`, {})),
      act("Resume", () => pub("POST", `/sandboxes/${id}/resume`, {})),
      act("Stop", () => pub("POST", `/sandboxes/${id}/stop`, {})),
      act("Start", () => pub("POST", `/sandboxes/${id}/start`, {})),
      h("span", { class: "row" }, count, act("Clone", async () => {
        const r = await pub<{ pause_ms: number; sandboxes: Sandbox[] }>("POST", `/sandboxes/${id}/clone`, { count: Number(count.value) });
        toast(`Cloned ×${r.sandboxes.length} (parent paused ${r.pause_ms} ms)`);
      })),
      act("Delete", async () => {
        await pub("DELETE", `/sandboxes/${id}`);
      }, true, "Delete this sandbox? Its disk and memory are gone for good.")),
    msg, fields);
  pub<Sandbox>("GET", `/sandboxes/${id}`).then(show).catch((e) => replace(msg, errorBox(explain(e))));
  // Live state: the API's server-sent events, with the session cookie.
  const es = new EventSource(`/console/api/v1/public/sandboxes/${id}/events`);
  es.addEventListener("state", (ev) => show((JSON.parse((ev as MessageEvent).data) as { sandbox: Sandbox }).sandbox));
  return () => es.close();
}

function terminal(p: HTMLElement, id: string): Cleanup {
  const box = h("div", { class: "term", id: "terminal" });
  const status = h("p", { class: "note", id: "term-status" }, "Connecting…");
  replace(p, status, box, h("p", { class: "note" }, "The shell keeps running if you leave this tab; coming back re-attaches to it for 10 minutes."));
  const term = new Terminal({ fontSize: 14, fontFamily: "ui-monospace, monospace", cursorBlink: true, convertEol: false });
  term.open(box);
  let ws: WebSocket | undefined;
  let closed = false;
  const size = () => {
    const probe = h("span", { style: "font: 14px ui-monospace, monospace; position:absolute; visibility:hidden" }, "W".repeat(10));
    document.body.appendChild(probe);
    const cw = probe.getBoundingClientRect().width / 10, ch = probe.getBoundingClientRect().height;
    probe.remove();
    const cols = Math.max(20, Math.min(300, Math.floor((box.clientWidth - 12) / cw)));
    const rows = Math.max(5, Math.min(100, Math.floor((box.clientHeight - 8) / (ch * 1.2))));
    return { rows, cols };
  };
  const key = "zeish-term-" + id;
  const connect = async () => {
    const { rows, cols } = size();
    term.resize(cols, rows);
    const a = await access(id);
    const base = a.url.replace(/^http/, "ws");
    const q = `rows=${rows}&cols=${cols}&access_token=${encodeURIComponent(a.token)}`;
    let url = `${base}/terminals/connect?${q}`;
    const pid = sessionStorage.getItem(key);
    if (pid) {
      const list = await data(id, "GET", "/terminals", {}).then((r) => r.json() as Promise<{ terminals: { pid: number; exited: boolean }[] }>);
      if (list.terminals.some((t) => String(t.pid) === pid && !t.exited)) url = `${base}/terminals/${pid}/connect?${q}`;
    }
    ws = new WebSocket(url);
    ws.binaryType = "arraybuffer";
    ws.onmessage = (ev) => {
      if (typeof ev.data !== "string") {
        term.write(new Uint8Array(ev.data as ArrayBuffer));
        return;
      }
      const m = JSON.parse(ev.data) as { type: string; pid?: number; result?: { exit_code: number }; error?: { message: string } };
      if (m.type === "started") {
        sessionStorage.setItem(key, String(m.pid));
        status.textContent = `Connected: pid ${m.pid}, ${cols}×${rows}`;
        term.focus();
      } else if (m.type === "exit") {
        sessionStorage.removeItem(key);
        status.textContent = `The shell exited with code ${m.result?.exit_code}. Reopen the tab for a new one.`;
      } else if (m.type === "refused" || m.type === "error") {
        status.textContent = m.error?.message ?? m.type;
      }
    };
    ws.onclose = () => {
      if (!closed && !status.textContent?.startsWith("The shell exited")) status.textContent = "Disconnected.";
    };
  };
  const enc = new TextEncoder();
  const input = term.onData((d) => ws?.readyState === WebSocket.OPEN && ws.send(enc.encode(d)));
  const onResize = () => {
    const { rows, cols } = size();
    term.resize(cols, rows);
    if (ws?.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "resize", rows, cols }));
  };
  window.addEventListener("resize", onResize);
  connect().catch((e) => { status.textContent = explain(e); });
  return () => {
    closed = true;
    window.removeEventListener("resize", onResize);
    input.dispose();
    ws?.close(1000, "tab left");
    term.dispose();
  };
}

function files(p: HTMLElement, id: string): Cleanup {
  let dir = "/root";
  const where = h("input", { id: "path", value: dir, "aria-label": "Directory" });
  const msg = h("div", { id: "files-msg" });
  const body = h("tbody");
  const editor = h("div");
  const picker = h("input", { type: "file", id: "upload", "aria-label": "Upload a file" });
  const join = (d: string, n: string) => (d.endsWith("/") ? d : d + "/") + n;
  const load = async () => {
    dir = where.value.trim() || "/";
    try {
      const list = (await (await data(id, "GET", "/files/list", { path: dir })).json() as { files: FileInfo[] }).files;
      list.sort((a, b) => Number(b.is_dir) - Number(a.is_dir) || a.name.localeCompare(b.name));
      replace(body, list.map((f) => h("tr", { "data-file": f.name },
        h("td", {}, f.is_dir ? h("a", { href: "#", onclick: (ev: Event) => { ev.preventDefault(); where.value = f.path; void load(); } }, f.name + "/") : f.name),
        h("td", {}, f.is_dir ? "" : String(f.size)),
        h("td", { class: "hide-narrow" }, f.mode),
        h("td", {}, f.is_dir ? "" : [
          h("button", { onclick: () => void download(f) }, "Download"), " ",
          f.size <= 256 * 1024 ? h("button", { onclick: () => void edit(f) }, "Edit") : null, " ",
          h("button", { class: "danger", onclick: () => void remove(f) }, "Delete"),
        ]))));
      replace(msg);
    } catch (e) {
      replace(msg, errorBox(explain(e)));
    }
  };
  const download = async (f: FileInfo) => {
    try {
      const blob = await (await data(id, "GET", "/files", { path: f.path })).blob();
      const a = h("a", { href: URL.createObjectURL(blob), download: f.name });
      document.body.appendChild(a);
      a.click();
      a.remove();
    } catch (e) {
      replace(msg, errorBox(explain(e)));
    }
  };
  const edit = async (f: FileInfo) => {
    try {
      const text = await (await data(id, "GET", "/files", { path: f.path })).text();
      const area = h("textarea", { id: "editor", "aria-label": "Contents of " + f.path });
      area.value = text;
      replace(editor, h("h2", {}, "Edit " + f.path), area, h("div", { class: "row" },
        h("button", {
          class: "primary", id: "save", onclick: async () => {
            try {
              await data(id, "PUT", "/files", { path: f.path }, area.value);
              toast("Saved " + f.path);
              replace(editor);
              void load();
            } catch (e) {
              replace(msg, errorBox(explain(e)));
            }
          },
        }, "Save"),
        h("button", { onclick: () => replace(editor) }, "Cancel")));
      area.focus();
    } catch (e) {
      replace(msg, errorBox(explain(e)));
    }
  };
  const remove = async (f: FileInfo) => {
    if (!confirm(`Delete ${f.path}?`)) return;
    try {
      await data(id, "DELETE", "/files", { path: f.path });
      void load();
    } catch (e) {
      replace(msg, errorBox(explain(e)));
    }
  };
  picker.onchange = async () => {
    const file = picker.files?.[0];
    if (!file) return;
    if (file.size > MAX_UPLOAD) {
      // zeishd refuses it too; saying so here saves sending it.
      replace(msg, errorBox(`Upload refused: ${file.name} is ${(file.size / 2 ** 20).toFixed(1)} MiB, over the console's 32 MiB limit; use \`zeishctl files put\` or an SDK.`));
      picker.value = "";
      return;
    }
    try {
      const fi = await upload(id, join(dir, file.name), file);
      toast(`Uploaded ${fi.path} (${fi.size} bytes)`);
      void load();
    } catch (e) {
      replace(msg, errorBox("Upload refused: " + explain(e)));
    }
    picker.value = "";
  };
  replace(p,
    h("form", { class: "row", onsubmit: (ev: Event) => { ev.preventDefault(); void load(); } },
      h("label", {}, "Directory", where), h("button", { type: "submit" }, "Open"),
      h("button", { type: "button", onclick: () => { where.value = dir.replace(/\/[^/]+\/?$/, "") || "/"; void load(); } }, "Up"),
      h("label", {}, "Upload (≤ 32 MiB)", picker)),
    msg,
    h("div", { class: "scroll" }, h("table", { id: "files" }, h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th", {}, "Size"), h("th", { class: "hide-narrow" }, "Mode"), h("th", {}, ""))), body)),
    editor);
  void load();
  return () => {};
}

function snapshots(p: HTMLElement, id: string): Cleanup {
  const msg = h("div", { id: "snap-msg" });
  const body = h("tbody");
  const name = h("input", { id: "snap-name", placeholder: "name (optional)", "aria-label": "Snapshot name" });
  const run = async (fn: () => Promise<unknown>, done: string) => {
    try {
      await fn();
      replace(msg, h("p", { class: "note", role: "status" }, done));
      void load();
    } catch (e) {
      replace(msg, errorBox(explain(e)));
    }
  };
  const load = async () => {
    try {
      const list = (await pub<{ snapshots: Snapshot[] }>("GET", `/sandboxes/${id}/snapshots`)).snapshots;
      replace(body, list.length === 0 ? h("tr", {}, h("td", { colspan: 3, class: "note" }, "No snapshots.")) : list.map((s) => h("tr", { "data-snapshot": s.name },
        h("td", {}, s.name, h("div", { class: "note" }, s.id)),
        h("td", { class: "hide-narrow" }, new Date(s.created_at).toLocaleString()),
        h("td", {},
          h("button", {
            onclick: () => confirm(`Restore ${s.name}? The sandbox's current disk and memory are replaced by the snapshot's.`) &&
              void run(() => pub("POST", `/snapshots/${s.id}/restore?wait=true`, {}), `Restored ${s.name}.`),
          }, "Restore"), " ",
          h("button", {
            class: "danger", onclick: () => confirm(`Delete snapshot ${s.name}?`) &&
              void run(() => pub("DELETE", `/snapshots/${s.id}`), `Deleted ${s.name}.`),
          }, "Delete")))));
    } catch (e) {
      replace(msg, errorBox(explain(e)));
    }
  };
  replace(p,
    h("form", {
      class: "row", onsubmit: (ev: Event) => {
        ev.preventDefault();
        const body: Record<string, string> = {};
        if (name.value.trim()) body.name = name.value.trim();
        void run(() => pub("POST", `/sandboxes/${id}/snapshots`, body), "Snapshot taken.");
        name.value = "";
      },
    }, h("label", {}, "Name", name), h("button", { class: "primary", type: "submit", id: "take-snapshot" }, "Take snapshot")),
    msg,
    h("div", { class: "scroll" }, h("table", { id: "snapshots" }, h("thead", {}, h("tr", {}, h("th", {}, "Snapshot"), h("th", { class: "hide-narrow" }, "Taken"), h("th", {}, ""))), body)));
  void load();
  return () => {};
}

const COLOURS: Record<string, string> = { running: "#238636", paused: "#9e6a03", starting: "#9e6a03", stopping: "#9e6a03", deleting: "#9e6a03", stopped: "#484f58", destroyed: "#30363d", error: "#da3633" };

function lineage(p: HTMLElement, id: string): Cleanup {
  const holder = h("div", { class: "scroll" });
  replace(p, h("p", { class: "note" }, "Ancestors above, descendants below; colours are states. Select a sandbox to open it."), holder);
  const load = async () => {
    try {
      const l = await pub<Lineage>("GET", `/sandboxes/${id}/lineage`);
      replace(holder, drawTree(l, id));
    } catch (e) {
      replace(holder, errorBox(explain(e)));
    }
  };
  void load();
  const timer = setInterval(() => void load(), 3000);
  return () => clearInterval(timer);
}

function drawTree(l: Lineage, current: string): SVGElement {
  const all: LineageEntry[] = [...l.ancestors, l.sandbox, ...l.descendants];
  const byId = new Map(all.map((e) => [e.id, e]));
  const kids = new Map<string, LineageEntry[]>();
  let root = l.sandbox;
  for (const e of all) {
    if (e.parent_id && byId.has(e.parent_id)) kids.set(e.parent_id, [...(kids.get(e.parent_id) ?? []), e]);
  }
  while (root.parent_id && byId.has(root.parent_id)) root = byId.get(root.parent_id)!;
  const W = 170, H = 46, GX = 20, GY = 40;
  const pos = new Map<string, { x: number; y: number }>();
  let next = 0;
  const place = (e: LineageEntry, depth: number): number => {
    const cs = kids.get(e.id) ?? [];
    let x: number;
    if (cs.length === 0) x = next++;
    else {
      const xs = cs.map((c) => place(c, depth + 1));
      x = (xs[0]! + xs[xs.length - 1]!) / 2;
    }
    pos.set(e.id, { x, y: depth });
    return x;
  };
  place(root, 0);
  const maxX = Math.max(...[...pos.values()].map((q) => q.x)), maxY = Math.max(...[...pos.values()].map((q) => q.y));
  const width = (maxX + 1) * (W + GX) + GX, height = (maxY + 1) * (H + GY) + GY;
  const g = svg("svg", { class: "lineage", id: "lineage", width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "Lineage tree" });
  const at = (id: string) => {
    const q = pos.get(id)!;
    return { x: GX + q.x * (W + GX), y: GY / 2 + q.y * (H + GY) };
  };
  for (const e of all) {
    if (!e.parent_id || !pos.has(e.parent_id) || !pos.has(e.id)) continue;
    const a = at(e.parent_id), b = at(e.id);
    g.appendChild(svg("line", { x1: a.x + W / 2, y1: a.y + H, x2: b.x + W / 2, y2: b.y, stroke: "#6e7681", "stroke-width": 2 }));
  }
  for (const e of all) {
    if (!pos.has(e.id)) continue;
    const { x, y } = at(e.id);
    const link = svg("a", { href: `#/sandboxes/${e.id}/lineage`, "data-node": e.id, "data-parent": e.parent_id ?? "", "data-state": e.state },
      svg("title", {}, `${e.name} (${e.state})`),
      svg("rect", { x, y, width: W, height: H, rx: 8, fill: COLOURS[e.state] ?? "#30363d", stroke: e.id === current ? "#5aa9ff" : "none", "stroke-width": 3 }),
      svg("text", { x: x + 10, y: y + 19 }, e.name.length > 22 ? e.name.slice(0, 21) + "…" : e.name),
      svg("text", { x: x + 10, y: y + 36 }, e.state));
    g.appendChild(link);
  }
  return g;
}

interface ListedPort { port: number; public: boolean; listening: boolean; loopback?: boolean; url: string; host?: string; tcp_url: string; browser_url?: string }

/**
 * How a port is opened in a browser: only ever on its own origin
 * (browser_url, <port>-<id>.<domain>), never the path form on this origin,
 * where a guest's page would run beside the console (the server sandboxes
 * it there anyway).
 */
function portLink(q: ListedPort): HTMLElement {
  if (!q.public) return h("span", { class: "note" }, "needs the sandbox's token: " + q.url);
  if (q.browser_url && /^https?:\/\//.test(q.browser_url)) return h("a", { href: q.browser_url, target: "_blank", rel: "noopener noreferrer", "data-browser-url": q.browser_url }, q.browser_url);
  return h("span", { class: "note" }, "set ZEISH_PUBLIC_DOMAIN to open it in a browser; for programs: " + q.url);
}

/** Ports: what the guest listens on, how each port is reached, and opening one to the public. */
function ports(p: HTMLElement, id: string): Cleanup {
  const body = h("tbody");
  const msg = h("div");
  const port = h("input", { id: "port-number", type: "number", min: 1, max: 65535, style: "width:7rem", "aria-label": "Port" });
  const setPublic = async (n: number, pub_: boolean) => {
    try {
      await pub("POST", `/sandboxes/${id}/ports`, { port: n, public: pub_ });
      replace(msg);
      await load();
    } catch (e) {
      replace(msg, errorBox(explain(e)));
    }
  };
  const load = async () => {
    try {
      const r = await pub<{ ports: ListedPort[] }>("GET", `/sandboxes/${id}/ports`);
      replace(body, r.ports.length === 0 ? h("tr", {}, h("td", { colspan: 4, class: "note" }, "Nothing listens on a TCP port in the guest yet.")) : r.ports.map((q) =>
        h("tr", { "data-port": String(q.port), "data-listening": String(q.listening), "data-public": String(q.public) },
          h("td", {}, String(q.port)),
          h("td", {}, q.listening ? (q.loopback ? "yes (loopback only)" : "yes") : "no"),
          h("td", {}, portLink(q)),
          h("td", {}, h("button", { class: q.public ? "danger" : undefined, onclick: () => setPublic(q.port, !q.public) }, q.public ? "Make private" : "Make public")))));
    } catch (e) {
      replace(msg, errorBox(explain(e)));
    }
  };
  replace(p,
    h("p", { class: "note" }, "Every guest port is reached through the data plane with the sandbox's token; a public port needs none, and opens in a browser on an origin of its own."),
    h("form", { class: "row", onsubmit: (ev: Event) => { ev.preventDefault(); void setPublic(Number((port as HTMLInputElement).value), true); } },
      h("label", {}, "Open a port to the public", port), h("button", { id: "open-port", type: "submit" }, "Open")),
    msg,
    h("div", { class: "scroll" }, h("table", { id: "ports" },
      h("thead", {}, h("tr", {}, h("th", {}, "Port"), h("th", {}, "Listening"), h("th", {}, "URL"), h("th", {}, ""))), body)));
  void load();
  const timer = setInterval(() => void load(), 3000);
  return () => clearInterval(timer);
}

interface DesktopStatus { running: boolean; display: string; width: number; height: number; depth: number; window_manager: string; user: string }

/** Desktop: a live view (a screenshot every second or so), click on it, type and send keys. */
function desktop(p: HTMLElement, id: string): Cleanup {
  const msg = h("div");
  const view = h("img", { id: "desktop-view", alt: "The sandbox's desktop", style: "max-width:100%;border:1px solid var(--line);cursor:crosshair" }) as HTMLImageElement;
  const text = h("input", { id: "desktop-text", placeholder: "text to type", size: 30 }) as HTMLInputElement;
  const keys = h("input", { id: "desktop-keys", placeholder: "e.g. Return or ctrl+c", size: 16 }) as HTMLInputElement;
  let stopped = false, url = "", status: DesktopStatus | undefined;
  const act = async (body: Record<string, unknown>) => {
    try {
      await data(id, "POST", "/desktop/actions", {}, JSON.stringify(body));
      replace(msg);
      void refresh();
    } catch (e) {
      replace(msg, errorBox(explain(e)));
    }
  };
  const refresh = async () => {
    try {
      const res = await data(id, "GET", "/desktop/screenshot", {});
      const next = URL.createObjectURL(await res.blob());
      view.src = next;
      if (url) URL.revokeObjectURL(url);
      url = next;
    } catch (e) {
      replace(msg, errorBox(explain(e)));
    }
  };
  view.addEventListener("click", (ev) => {
    if (!status) return;
    const r = view.getBoundingClientRect();
    const x = Math.round((ev.clientX - r.left) * status.width / r.width), y = Math.round((ev.clientY - r.top) * status.height / r.height);
    void act({ action: "left_click", x, y });
  });
  replace(p, h("p", { class: "note" }, "Loading the desktop…"));
  pub<DesktopStatus>("GET", `/sandboxes/${id}/desktop`).then((st) => {
    status = st;
    replace(p,
      h("p", { class: "note", id: "desktop-status" }, `Display ${st.display}, ${st.width}×${st.height}, ${st.window_manager || "no window manager"}, as ${st.user}. Click the picture to click there.`),
      h("form", { class: "row", onsubmit: (ev: Event) => { ev.preventDefault(); void act({ action: "type", text: text.value }); text.value = ""; } },
        h("label", {}, "Type", text), h("button", { id: "desktop-type", type: "submit" }, "Type")),
      h("form", { class: "row", onsubmit: (ev: Event) => { ev.preventDefault(); void act({ action: "key", keys: keys.value.trim() }); } },
        h("label", {}, "Keys", keys), h("button", { id: "desktop-key", type: "submit" }, "Send"),
        h("a", { id: "desktop-download", href: "#", onclick: (ev: Event) => { ev.preventDefault(); if (url) { const a = h("a", { href: url, download: `${id}-desktop.png` }); a.click(); } } }, "Download screenshot")),
      msg, view);
    const loop = async () => {
      while (!stopped) {
        await refresh();
        await new Promise((r) => setTimeout(r, 1200));
      }
    };
    void loop();
  }).catch((e) => replace(p, errorBox(explain(e)),
    h("p", { class: "note" }, "A desktop runs in sandboxes created or forked with desktop: true from a template that has one (the desktop template).")));
  return () => {
    stopped = true;
    if (url) URL.revokeObjectURL(url);
  };
}

function usage(p: HTMLElement, id: string): Cleanup {
  const out = h("div", { id: "usage" });
  replace(p, h("p", { class: "note" }, "Cost in each 10-minute slice of the last two hours."), out);
  (async () => {
    const now = Date.now(), step = 10 * 60_000, n = 12;
    const slices = await Promise.all(Array.from({ length: n }, (_, i) => {
      const from = new Date(now - (n - i) * step).toISOString(), to = new Date(now - (n - i - 1) * step).toISOString();
      return pub<UsageReport>("GET", `/usage?from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}`)
        .then((r) => ({ from, cost: r.sandboxes.find((s) => s.sandbox_id === id)?.usage.cost_micros ?? 0 }));
    }));
    const total = await pub<UsageReport>("GET", "/usage");
    const mine = total.sandboxes.find((s) => s.sandbox_id === id);
    const max = Math.max(1, ...slices.map((s) => s.cost));
    replace(out,
      h("dl", { class: "fields" },
        h("dt", {}, "Cost so far"), h("dd", {}, money(mine?.usage.cost_micros ?? 0)),
        h("dt", {}, "Running"), h("dd", {}, `${Math.round(mine?.usage.running_seconds ?? 0)} s`),
        h("dt", {}, "Compute"), h("dd", {}, money(mine?.usage.compute_micros ?? 0)),
        h("dt", {}, "Storage"), h("dd", {}, money(mine?.usage.storage_micros ?? 0))),
      h("table", { "aria-label": "Cost over time" }, slices.map((s) => h("tr", {},
        h("td", { class: "note" }, new Date(s.from).toLocaleTimeString()),
        h("td", { style: "width:70%" }, h("div", { class: "bar", style: `width:${(100 * s.cost) / max}%` })),
        h("td", {}, money(s.cost))))));
  })().catch((e) => replace(out, errorBox(explain(e))));
  return () => {};
}
