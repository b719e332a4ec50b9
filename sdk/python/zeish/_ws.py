"""The client side of WebSocket (RFC 6455) as far as terminals need it,
without I/O: the opening handshake and frames. The sync and async terminals
run it over a socket and an asyncio stream.

Written here rather than taken from python3-websockets because Debian 12's
websockets (10.4) has no synchronous client, and one codec under both
clients keeps their behaviour identical.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from dataclasses import dataclass
from urllib.parse import urlsplit

from .errors import ZeishError, error_from_response, make_error

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA

#: Largest message accepted from the server (a terminal's scrollback is 64 KiB).
MAX_MESSAGE = 16 << 20


@dataclass(frozen=True)
class Target:
    """Where to connect for a ws:// or wss:// URL (http(s) URLs are taken as such)."""

    host: str
    port: int
    tls: bool
    resource: str  # path and query

    @classmethod
    def of(cls, url: str) -> Target:
        u = urlsplit(url)
        tls = u.scheme in ("wss", "https")
        if u.scheme not in ("ws", "wss", "http", "https") or not u.hostname:
            raise make_error(400, "invalid_argument", f"not a WebSocket URL: {url}")
        port = u.port or (443 if tls else 80)
        resource = (u.path or "/") + (f"?{u.query}" if u.query else "")
        return cls(u.hostname, port, tls, resource)

    @property
    def host_header(self) -> str:
        default = 443 if self.tls else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


def handshake(target: Target, headers: dict[str, str]) -> tuple[bytes, str]:
    """The opening request, and the key its answer must confirm."""
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        f"GET {target.resource} HTTP/1.1",
        f"Host: {target.host_header}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
    ]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode(), key


def parse_head(head: bytes) -> tuple[int, str, dict[str, str]]:
    """Status, reason and headers (lower-case names) of an HTTP answer's head."""
    text = head.decode("latin-1")
    status_line, *rest = text.split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise make_error(0, "unavailable", f"not an HTTP answer: {status_line[:80]!r}")
    headers: dict[str, str] = {}
    for line in rest:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return int(parts[1]), parts[2] if len(parts) > 2 else "", headers


def check_accept(headers: dict[str, str], key: str) -> None:
    """Raises unless the 101 answer confirms our key."""
    want = base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()
    if headers.get("sec-websocket-accept") != want or headers.get("upgrade", "").lower() != "websocket":
        raise make_error(0, "unavailable", "the server did not accept the WebSocket handshake")


def refusal(status: int, reason: str, headers: dict[str, str], body: bytes) -> ZeishError:
    """The error a refused handshake (a plain HTTP error answer) stands for."""
    return error_from_response(status, headers, body, reason)


def frame(opcode: int, payload: bytes) -> bytes:
    """One final, masked client frame."""
    n = len(payload)
    head = bytearray([0x80 | opcode])
    if n < 126:
        head.append(0x80 | n)
    elif n < 1 << 16:
        head.append(0x80 | 126)
        head += struct.pack("!H", n)
    else:
        head.append(0x80 | 127)
        head += struct.pack("!Q", n)
    mask = os.urandom(4)
    return bytes(head) + mask + _xor(payload, mask)


def close_frame(code: int = 1000, reason: str = "") -> bytes:
    return frame(OP_CLOSE, struct.pack("!H", code) + reason.encode()[:120])


def header_size(first2: bytes) -> int:
    """How long a frame's header is, from its first two bytes."""
    n = first2[1] & 0x7F
    extra = 2 if n == 126 else 8 if n == 127 else 0
    return 2 + extra + (4 if first2[1] & 0x80 else 0)


@dataclass(frozen=True)
class Header:
    fin: bool
    opcode: int
    length: int
    mask: bytes | None


def parse_header(head: bytes) -> Header:
    """A frame header of header_size() bytes."""
    if head[0] & 0x70:
        raise make_error(0, "unavailable", "WebSocket frame with reserved bits set")
    n = head[1] & 0x7F
    i = 2
    if n == 126:
        (n,) = struct.unpack("!H", head[2:4])
        i = 4
    elif n == 127:
        (n,) = struct.unpack("!Q", head[2:10])
        i = 10
    if n > MAX_MESSAGE:
        raise make_error(0, "unavailable", f"WebSocket frame of {n} bytes is too large")
    mask = head[i : i + 4] if head[1] & 0x80 else None
    return Header(bool(head[0] & 0x80), head[0] & 0x0F, n, mask)


def unmask(payload: bytes, mask: bytes | None) -> bytes:
    return payload if mask is None else _xor(payload, mask)


def close_info(payload: bytes) -> tuple[int, str]:
    """The code and reason of a close frame's payload."""
    if len(payload) < 2:
        return 1005, ""
    (code,) = struct.unpack("!H", payload[:2])
    return code, payload[2:].decode("utf-8", "replace")


def _xor(data: bytes, mask: bytes) -> bytes:
    if not data:
        return b""
    n = len(data)
    m = int.from_bytes((mask * (n // 4 + 1))[:n], "big")
    return (int.from_bytes(data, "big") ^ m).to_bytes(n, "big")
