// The desktop of a sandbox created or forked with `desktop: true`: the
// computer-use actions sandboxd performs on its X server, and screenshots.
import type { DataPlane } from "./sandbox.js";
import type { Zeish } from "./client.js";
import { enc } from "./client.js";
import type { DesktopAction, DesktopActionResult, DesktopStatus } from "./types.js";
import { base64Decode } from "./util.js";

export type MouseButton = "left" | "right" | "middle" | "double";

/** A sandbox's desktop (`sandbox.desktop`). Coordinates are pixels from the screen's top left corner. */
export class Desktop {
  constructor(private readonly dp: DataPlane, private readonly zeish: Zeish, private readonly id: string) {}

  /** Display, screen size and window manager; throws `desktop_not_enabled` without a desktop. */
  status(): Promise<DesktopStatus> {
    return this.zeish.json("GET", `/public/sandboxes/${enc(this.id)}/desktop`);
  }

  /** One action as the API takes it; resolves to the cursor's position after it. */
  action(a: DesktopAction): Promise<DesktopActionResult> {
    return this.dp.json("POST", "/desktop/actions", { json: a });
  }

  /** The screen as PNG bytes. */
  async screenshot(): Promise<Uint8Array> {
    const res = await this.dp.request("GET", "/desktop/screenshot", { headers: { accept: "image/png" } });
    return new Uint8Array(await res.arrayBuffer());
  }

  /** A screenshot with the cursor's position, in one call (the PNG decoded from the JSON answer). */
  async screenshotWithCursor(): Promise<{ png: Uint8Array; width: number; height: number; x: number; y: number }> {
    const r = await this.action({ action: "screenshot" });
    return { png: base64Decode(r.image ?? ""), width: r.width ?? 0, height: r.height ?? 0, x: r.x, y: r.y };
  }

  moveMouse(x: number, y: number): Promise<DesktopActionResult> {
    return this.action({ action: "mouse_move", x, y });
  }

  /** Clicks at x, y (left by default; `double` is a left double click). */
  click(x: number, y: number, button: MouseButton = "left"): Promise<DesktopActionResult> {
    const action = ({ left: "left_click", right: "right_click", middle: "middle_click", double: "double_click" } as const)[button];
    return this.action({ action, x, y });
  }

  drag(fromX: number, fromY: number, toX: number, toY: number): Promise<DesktopActionResult> {
    return this.action({ action: "drag", x: fromX, y: fromY, to_x: toX, to_y: toY });
  }

  /** Types text into the focused window; a newline presses Return. */
  type(text: string): Promise<DesktopActionResult> {
    return this.action({ action: "type", text });
  }

  /** Presses key combos: "Return", "ctrl+c", "ctrl+a Delete". */
  key(keys: string): Promise<DesktopActionResult> {
    return this.action({ action: "key", keys });
  }

  scroll(x: number, y: number, direction: "up" | "down" | "left" | "right", amount?: number): Promise<DesktopActionResult> {
    return this.action({ action: "scroll", x, y, direction, ...(amount !== undefined ? { amount } : {}) });
  }

  cursorPosition(): Promise<DesktopActionResult> {
    return this.action({ action: "cursor_position" });
  }
}
