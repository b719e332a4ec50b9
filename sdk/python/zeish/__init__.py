"""zeish: sandboxes that are real VMs, forked while they run and snapshotted.

Sync and async clients have the same surface::

    import zeish

    with zeish.Zeish() as z:                      # ZEISH_API_URL, ZEISH_API_KEY or admin.key
        with z.sandboxes.create("debian", memory_mib=512) as sbx:   # deleted at the end
            print(sbx.run("uname -a").stdout)
            with sbx.clone(count=3) as fork:      # three children carry on from here
                for child in fork:
                    child.run(["python3", "-c", "print(1)"], check=True)

    async with zeish.AsyncZeish() as z:
        async with await z.sandboxes.create() as sbx:
            print((await sbx.run("uname -a")).stdout)

The API's objects are TypedDicts generated from api/openapi.yaml (``zeish.schema``).
"""

from ._async.client import AsyncAdmin, AsyncSandboxes, AsyncSecrets, AsyncTemplate, AsyncTemplates, AsyncZeish
from ._async.desktop import AsyncDesktop, Screenshot
from ._async.execution import AsyncExecution
from ._async.files import AsyncFileReader, AsyncFiles, AsyncProcesses
from ._async.sandbox import AsyncCloneResult, AsyncSandbox, AsyncSnapshot, AsyncSnapshots
from ._async.terminal import AsyncTerminal
from ._config import DEFAULT_API_URL, admin_key_path
from ._sync.client import Admin, Sandboxes, Secrets, Template, Templates, Zeish
from ._sync.desktop import Desktop
from ._sync.execution import Execution
from ._sync.files import FileReader, Files, Processes
from ._sync.sandbox import CloneResult, Sandbox, Snapshot, Snapshots
from ._sync.terminal import Terminal
from ._wire import CommandError, ExecChunk, ExecResult
from .errors import (
    AuthenticationError,
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    RateLimitError,
    SandboxStateError,
    ServerError,
    ZeishError,
    ZeishTimeoutError,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_API_URL",
    "Admin",
    "AsyncAdmin",
    "AsyncCloneResult",
    "AsyncDesktop",
    "AsyncExecution",
    "AsyncFileReader",
    "AsyncFiles",
    "AsyncProcesses",
    "AsyncSandbox",
    "AsyncSandboxes",
    "AsyncSecrets",
    "AsyncSnapshot",
    "AsyncSnapshots",
    "AsyncTemplate",
    "AsyncTemplates",
    "AsyncTerminal",
    "AsyncZeish",
    "AuthenticationError",
    "CloneResult",
    "CommandError",
    "ConflictError",
    "Desktop",
    "ExecChunk",
    "ExecResult",
    "Execution",
    "FileReader",
    "Files",
    "InvalidArgumentError",
    "NotFoundError",
    "Processes",
    "RateLimitError",
    "Sandbox",
    "SandboxStateError",
    "Sandboxes",
    "Screenshot",
    "Secrets",
    "ServerError",
    "Snapshot",
    "Snapshots",
    "Template",
    "Templates",
    "Terminal",
    "ZeishError",
    "ZeishTimeoutError",
    "Zeish",
    "admin_key_path",
]
