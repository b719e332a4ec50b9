"""Where the client finds zeishd and its key: the same rules as zeishctl
(internal/cli) and the Go SDK's KeyFromEnv."""

from __future__ import annotations

import os
from pathlib import Path

#: Where a zeishd started with defaults serves its API.
DEFAULT_API_URL = "http://127.0.0.1:7420/api/v1"


def default_data_dir() -> Path:
    """zeishd's data dir when ZEISH_DATA_DIR is unset: /var/lib/zeish for root,
    else $XDG_DATA_HOME/zeish or ~/.local/share/zeish."""
    if os.geteuid() == 0:
        return Path("/var/lib/zeish")
    xdg = os.environ.get("XDG_DATA_HOME")
    if xdg:
        return Path(xdg) / "zeish"
    try:
        return Path.home() / ".local" / "share" / "zeish"
    except RuntimeError:
        return Path(".zeish")


def data_dir() -> Path:
    """ZEISH_DATA_DIR when set, else :func:`default_data_dir`."""
    d = os.environ.get("ZEISH_DATA_DIR")
    return Path(d) if d else default_data_dir()


def admin_key_path() -> Path:
    """The file zeishd writes its first API key to (mode 0600)."""
    return data_dir() / "admin.key"


def api_url_from_env() -> str:
    """ZEISH_API_URL, else the default, without a trailing slash."""
    return (os.environ.get("ZEISH_API_URL") or DEFAULT_API_URL).rstrip("/")


def api_key_from_env() -> str | None:
    """ZEISH_API_KEY, else the contents of the admin key file, else None."""
    key = os.environ.get("ZEISH_API_KEY", "").strip()
    if key:
        return key
    try:
        key = admin_key_path().read_text().strip()
    except OSError:
        return None
    return key or None
