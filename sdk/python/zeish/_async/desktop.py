"""The desktop of a sandbox created or forked with ``desktop=True``: the
computer-use actions sandboxd performs on its X server, and screenshots."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Literal, cast

from .._wire import body
from ..schema import DesktopActionResult, DesktopStatus
from ._dataplane import AsyncDataPlane, quote
from ._http import AsyncTransport

MouseButton = Literal["left", "right", "middle", "double"]
Direction = Literal["up", "down", "left", "right"]


@dataclass(frozen=True)
class Screenshot:
    """A screenshot and where the cursor was."""

    png: bytes
    width: int
    height: int
    x: int
    y: int


class AsyncDesktop:
    """A sandbox's desktop (``sandbox.desktop``). Coordinates are pixels from
    the screen's top left corner; off the screen is InvalidArgumentError
    ``off_screen``, a sandbox without a desktop ``desktop_not_enabled``."""

    def __init__(self, transport: AsyncTransport, dp: AsyncDataPlane) -> None:
        self._t = transport
        self._dp = dp

    async def status(self) -> DesktopStatus:
        """Display, screen size and window manager."""
        return cast(DesktopStatus, await self._t.json("GET", f"/public/sandboxes/{quote(self._dp.sandbox_id)}/desktop"))

    async def action(
        self,
        action: str,
        *,
        x: int | None = None,
        y: int | None = None,
        to_x: int | None = None,
        to_y: int | None = None,
        text: str | None = None,
        keys: str | None = None,
        direction: Direction | None = None,
        amount: int | None = None,
    ) -> DesktopActionResult:
        """One action as the API takes it (``DesktopAction``); returns the cursor's position after it."""
        req = body(action=action, x=x, y=y, to_x=to_x, to_y=to_y, text=text, keys=keys, direction=direction, amount=amount)
        return cast(DesktopActionResult, await self._dp.json("POST", "/desktop/actions", json=req))

    async def screenshot(self) -> bytes:
        """The screen as PNG bytes."""
        resp = await self._dp.send("GET", "/desktop/screenshot", headers={"accept": "image/png"})
        return resp.content

    async def screenshot_with_cursor(self) -> Screenshot:
        """A screenshot and the cursor's position, in one call."""
        r = await self.action("screenshot")
        return Screenshot(base64.b64decode(r.get("image", "")), r.get("width", 0), r.get("height", 0), r["x"], r["y"])

    async def move_mouse(self, x: int, y: int) -> DesktopActionResult:
        return await self.action("mouse_move", x=x, y=y)

    async def click(self, x: int | None = None, y: int | None = None, button: MouseButton = "left") -> DesktopActionResult:
        """Clicks at x, y (else where the cursor is); ``double`` is a left double click."""
        return await self.action(f"{button}_click", x=x, y=y)

    async def drag(self, from_x: int, from_y: int, to_x: int, to_y: int) -> DesktopActionResult:
        return await self.action("drag", x=from_x, y=from_y, to_x=to_x, to_y=to_y)

    async def type(self, text: str) -> DesktopActionResult:
        """Types text into the focused window; a newline presses Return."""
        return await self.action("type", text=text)

    async def key(self, keys: str) -> DesktopActionResult:
        """Presses key combos: ``"Return"``, ``"ctrl+c"``, ``"ctrl+a Delete"``."""
        return await self.action("key", keys=keys)

    async def scroll(self, x: int | None, y: int | None, direction: Direction, amount: int | None = None) -> DesktopActionResult:
        return await self.action("scroll", x=x, y=y, direction=direction, amount=amount)

    async def cursor_position(self) -> DesktopActionResult:
        return await self.action("cursor_position")
