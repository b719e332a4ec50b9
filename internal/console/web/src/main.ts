// The zeish console: a hash-routed single page. Every page renders into
// <main> and returns a cleanup (timers, event streams, sockets).
import { call, explain, type Session } from "./api";
import { h, replace, errorBox } from "./dom";
import { sandboxesPage } from "./sandboxes";
import { detailPage } from "./detail";
import { accountPage, templatesPage } from "./account";

export type Cleanup = () => void;
let cleanup: Cleanup = () => {};
let session: Session | undefined;

async function loadSession(): Promise<Session | undefined> {
  try {
    session = await call<Session>("GET", "/session");
  } catch {
    session = undefined;
  }
  return session;
}

function header(): void {
  const top = document.getElementById("top")!;
  if (!session) {
    replace(top, h("b", {}, "zeish"));
    return;
  }
  replace(top,
    h("b", {}, "zeish"),
    h("nav", { "aria-label": "Main" },
      h("a", { href: "#/sandboxes" }, "Sandboxes"),
      h("a", { href: "#/templates" }, "Templates"),
      h("a", { href: "#/account" }, "Account")),
    h("span", { class: "who" }, session.account.name),
    h("button", {
      id: "signout", onclick: async () => {
        await call("DELETE", "/session").catch(() => {});
        session = undefined;
        location.hash = "#/login";
      },
    }, "Sign out"));
}

function loginPage(main: HTMLElement): Cleanup {
  const key = h("input", { id: "apikey", type: "password", autocomplete: "off", required: true, placeholder: "zk_…", size: 40 });
  const err = h("div");
  const form = h("form", {
    class: "login", onsubmit: async (ev: Event) => {
      ev.preventDefault();
      try {
        session = await call<Session>("POST", "/session", { api_key: key.value.trim() });
        location.hash = "#/sandboxes";
      } catch (e) {
        replace(err, errorBox(explain(e)));
      }
    },
  },
  h("h1", {}, "Sign in to zeish"),
  h("label", {}, "API key", key),
  h("p", { class: "note" }, "The key is exchanged for a session cookie; it is not stored in the browser."),
  h("button", { class: "primary", type: "submit" }, "Sign in"), err);
  replace(main, form);
  key.focus();
  return () => {};
}

async function route(): Promise<void> {
  cleanup();
  cleanup = () => {};
  const main = document.getElementById("main")!;
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  if (parts[0] !== "login" && !session && !(await loadSession())) {
    location.hash = "#/login";
    return;
  }
  header();
  replace(main);
  try {
    switch (parts[0]) {
      case "login": cleanup = loginPage(main); break;
      case "sandboxes":
        cleanup = parts[1] ? detailPage(main, parts[1], parts[2] || "overview") : sandboxesPage(main);
        break;
      case "templates": cleanup = templatesPage(main); break;
      case "account": cleanup = accountPage(main, session!); break;
      default: location.hash = "#/sandboxes";
    }
  } catch (e) {
    replace(main, errorBox(explain(e)));
  }
  main.focus({ preventScroll: true });
}

window.addEventListener("hashchange", () => void route());
void route();
