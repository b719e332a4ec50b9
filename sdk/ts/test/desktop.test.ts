// The desktop calls' wire shapes against a tiny in-process fake server.
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { InvalidArgumentError, Sandbox, Zeish } from "../src/index.js";

const ID = "sbx_dddddddddddddddddddd";
const PNG = Buffer.from("\x89PNG-fake", "latin1");
let server: Server;
let base: string;
const sent: string[] = [];

function sendJSON(res: ServerResponse, status: number, v: unknown) {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(v));
}

async function body(req: IncomingMessage): Promise<string> {
  let s = "";
  for await (const c of req) s += c;
  return s;
}

async function handle(req: IncomingMessage, res: ServerResponse) {
  const p = new URL(req.url!, base).pathname;
  const m = `${req.method} ${p}`;
  if (m === `GET /api/v1/public/sandboxes/${ID}`) {
    return sendJSON(res, 200, { id: ID, name: "d", state: "running", desktop: true });
  }
  if (m === `POST /api/v1/public/sandboxes/${ID}/access`) {
    return sendJSON(res, 200, { url: `${base}/data/v1/sandboxes/${ID}`, token: "zdp_1", expires_at: new Date(Date.now() + 3600_000).toISOString() });
  }
  if (m === `GET /api/v1/public/sandboxes/${ID}/desktop`) {
    return sendJSON(res, 200, { running: true, display: ":0", width: 1280, height: 800, depth: 24, window_manager: "openbox", user: "user" });
  }
  if (m === `GET /data/v1/sandboxes/${ID}/desktop/screenshot`) {
    res.writeHead(200, { "content-type": "image/png" });
    return res.end(PNG);
  }
  if (m === `POST /data/v1/sandboxes/${ID}/desktop/actions`) {
    const b = await body(req);
    sent.push(b);
    const a = JSON.parse(b) as { action: string; x?: number };
    if (a.x !== undefined && a.x >= 1280) {
      return sendJSON(res, 400, { error: { code: "off_screen", message: "x, y = 5000, 1 is off the 1280x800 screen" } });
    }
    if (a.action === "screenshot") return sendJSON(res, 200, { x: 1, y: 2, image: PNG.toString("base64"), width: 1280, height: 800 });
    return sendJSON(res, 200, { x: 7, y: 8 });
  }
  sendJSON(res, 404, { error: { code: "not_found", message: m } });
}

before(async () => {
  server = createServer((req, res) => void handle(req, res));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(() => new Promise<void>((r) => server.close(() => r())));

test("desktop: actions send the API's shapes and answer with the cursor", async () => {
  const sbx = await Sandbox.connect(ID, { zeish: new Zeish({ apiUrl: `${base}/api/v1`, apiKey: "zk_test" }) });
  const d = sbx.desktop;
  assert.deepEqual(await d.click(10, 20), { x: 7, y: 8 });
  await d.click(10, 20, "right");
  await d.moveMouse(0, 0);
  await d.drag(1, 2, 3, 4);
  await d.type("ls\n");
  await d.key("ctrl+c");
  await d.scroll(5, 6, "down", 2);
  await d.cursorPosition();
  assert.deepEqual(sent.map((s) => JSON.parse(s)), [
    { action: "left_click", x: 10, y: 20 },
    { action: "right_click", x: 10, y: 20 },
    { action: "mouse_move", x: 0, y: 0 },
    { action: "drag", x: 1, y: 2, to_x: 3, to_y: 4 },
    { action: "type", text: "ls\n" },
    { action: "key", keys: "ctrl+c" },
    { action: "scroll", x: 5, y: 6, direction: "down", amount: 2 },
    { action: "cursor_position" },
  ]);
  assert.deepEqual(Buffer.from(await d.screenshot()), PNG);
  const shot = await d.screenshotWithCursor();
  assert.deepEqual([Buffer.from(shot.png), shot.width, shot.height, shot.x, shot.y], [PNG, 1280, 800, 1, 2]);
  assert.equal((await d.status()).window_manager, "openbox");
  await assert.rejects(d.click(5000, 1), (e: unknown) => e instanceof InvalidArgumentError && e.code === "off_screen");
});
