"""Errors the SDK raises.

Every failure is a :class:`ZeishError` carrying the API's stable ``code`` (see
the ``ErrorCode`` schema of api/openapi.yaml), the HTTP ``status`` (0 when no
answer came) and the ``request_id`` zeishd logged the request under. Its class
follows the code's status, so callers can catch broadly or by code::

    try:
        sbx.clone(count=16)
    except zeish.ConflictError as e:
        if e.code == "node_full": ...
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .schema import ERROR_CODES, ERROR_STATUS

__all__ = [
    "ZeishError",
    "InvalidArgumentError",
    "AuthenticationError",
    "NotFoundError",
    "ConflictError",
    "RateLimitError",
    "ZeishTimeoutError",
    "ServerError",
    "SandboxStateError",
    "error_class",
    "make_error",
    "error_from_response",
]


class ZeishError(Exception):
    """A failed call: the API's ``code``, the HTTP ``status`` and the ``request_id``."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        request_id: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        #: The HTTP status; 0 when no response came (a network error) or the
        #: error arrived inside a stream that had begun with 200.
        self.status = status
        #: The API's stable error code, e.g. ``"name_taken"``.
        self.code = code
        #: What went wrong, for humans.
        self.message = message
        #: The request's id (``X-Request-Id``): zeishd's log has a server error's detail under it.
        self.request_id = request_id
        #: Seconds to wait before retrying (``Retry-After``, with ``rate_limited``).
        self.retry_after = retry_after

    def __str__(self) -> str:
        rid = f", request {self.request_id}" if self.request_id else ""
        return f"{self.message} ({self.code}{rid})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, code={self.code!r}, message={self.message!r})"


class InvalidArgumentError(ZeishError):
    """400: the request was malformed (``invalid_argument``, ``unknown_template``, ``off_screen``, …)."""


class AuthenticationError(ZeishError):
    """401/403: ``unauthenticated``, ``token_expired``, ``forbidden``."""


class NotFoundError(ZeishError):
    """404: ``not_found`` (no such object, or another account's), ``file_not_found``."""


class ConflictError(ZeishError):
    """409: the state does not allow it (``invalid_state``, ``name_taken``, ``node_full``, …)."""


class RateLimitError(ZeishError):
    """429: ``rate_limited`` (see ``retry_after``), ``daily_cap_reached``, ``too_many_requests``, ``account_calls_full``."""


class ZeishTimeoutError(ZeishError):
    """503 ``timeout``: an operation, or a wait, did not finish in time."""


class ServerError(ZeishError):
    """500 ``internal``, 503 ``unavailable``, or no answer at all (status 0)."""


class SandboxStateError(ConflictError):
    """A sandbox settled in another state than the one waited for.

    A sandbox in ``error`` carries its stable ``error_code`` (``boot_failed``,
    ``boot_timeout``, ``git_clone_failed``, …) and ``error_message`` (for a
    failed boot, the last lines of the guest's console).
    """

    def __init__(
        self,
        sandbox_id: str,
        state: str,
        wanted: str,
        *,
        state_reason: str | None = None,
        error_code: str | None = None,
        error_message: str | None = None,
    ) -> None:
        why = f"{error_code}: {error_message or state_reason or ''}" if error_code else state_reason
        super().__init__(0, "invalid_state", f"sandbox {sandbox_id} is {state}, not {wanted}" + (f": {why}" if why else ""))
        self.sandbox_id = sandbox_id
        self.state = state
        self.wanted = wanted
        self.state_reason = state_reason
        self.error_code = error_code
        self.error_message = error_message

    @classmethod
    def of(cls, sandbox: Mapping[str, Any], wanted: str) -> SandboxStateError:
        """The error for a sandbox object (the API's ``Sandbox``) that is not in ``wanted``."""
        return cls(
            str(sandbox.get("id", "")),
            str(sandbox.get("state", "")),
            wanted,
            state_reason=sandbox.get("state_reason"),
            error_code=sandbox.get("error_code"),
            error_message=sandbox.get("error_message"),
        )


_BY_STATUS: dict[int, type[ZeishError]] = {
    400: InvalidArgumentError,
    401: AuthenticationError,
    403: AuthenticationError,
    404: NotFoundError,
    409: ConflictError,
    429: RateLimitError,
}

# The code a status implies when the body names none (a proxy's error page).
_CODE_FOR_STATUS = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    409: "invalid_state",
    413: "upload_too_large",
    429: "rate_limited",
    502: "unavailable",  # a proxy's: zeishd is not reachable behind it (errdefs.FromHTTPStatus)
    503: "unavailable",
    504: "timeout",
}


def error_class(code: str) -> type[ZeishError]:
    """The class of an error code, from its HTTP status in the contract."""
    if code == "timeout":
        return ZeishTimeoutError
    status = ERROR_STATUS.get(code)
    if status is None:
        return ZeishError
    return _BY_STATUS.get(status, ServerError)


def make_error(
    status: int, code: str, message: str, *, request_id: str | None = None, retry_after: int | None = None
) -> ZeishError:
    """The fitting ZeishError subclass for code."""
    return error_class(code)(status, code, message, request_id=request_id, retry_after=retry_after)


def error_from_response(status: int, headers: Mapping[str, str], body: bytes, reason: str = "") -> ZeishError:
    """Reads an error envelope; a body that is not one keeps the status's code and its text."""
    code = _CODE_FOR_STATUS.get(status, "internal")
    text = body.decode("utf-8", "replace").strip()
    message = text or reason or f"HTTP {status}"
    request_id = headers.get("x-request-id") or None
    try:
        env = json.loads(body)
    except ValueError:
        env = None
    if isinstance(env, dict) and isinstance(env.get("error"), dict):
        err = env["error"]
        if err.get("code") in ERROR_CODES:
            code = err["code"]
        if isinstance(err.get("message"), str):
            message = err["message"]
        if isinstance(err.get("request_id"), str):
            request_id = err["request_id"]
    ra = headers.get("retry-after", "").strip()
    return make_error(status, code, message, request_id=request_id, retry_after=int(ra) if ra.isdigit() else None)
