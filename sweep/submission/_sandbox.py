"""An isolated view of this machine for the fresh check: what a machine that never ran this project would show.

``isolated(argv, ...)`` wraps a command in bubblewrap (Debian's ``bubblewrap``): the system's programs,
libraries and configuration read-only (``/usr``, ``/etc`` and the interpreter's own prefix), the folders the
check hands it (the folder's copy, the new virtual environment, an empty HOME), empty scratch folders
(``/tmp``, ``/var/tmp``), a fresh ``/dev`` and ``/proc``, and nothing else: no checkout, no model cache, no
``/root``, ``/opt``, ``/work`` or ``/data``. The system and scratch folders are the path rule's (``_paths``). A
path the stack needs outside that view is missing there as it would be on the organisers' machine, and
``missing_paths`` reads which from the stack's log. The network stays shared (the checker times the stack
on 127.0.0.1) unless ``network=False``: the install from a wheelhouse, where no index may be reached.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from errors import InstallError
from sweep.submission._paths import INSTALLED, SCRATCH

__all__ = ["SANDBOX", "isolated", "missing_paths"]

SANDBOX = "bwrap"
# What a failed boot's log says of a path it could not open, in Python's and the C library's words
_MISSING = re.compile(
    r"(?:No such file or directory|Permission denied|Read-only file system|not found)\W{0,4}['\"]?(/[^'\"\s:,)]+)"
)


def _system_binds() -> list[str]:
    binds: list[str] = []
    # the system as the path rule has it, the kernel's /sys read-only (/dev and /proc are made fresh), and an
    # interpreter built outside /usr (a /usr/local or /opt Python)
    roots = [*INSTALLED, "/sys", sys.base_prefix]
    for root in dict.fromkeys(roots):
        path = Path(root)
        if path.is_symlink():
            binds += ["--symlink", str(path.readlink()), root]
        elif path.is_dir() and not any(root.startswith(f"{done}/") for done in roots if done != root):
            binds += ["--ro-bind", root, root]
    return binds


def _devices() -> list[str]:
    """A minimal /dev, and the GPUs' device files where this machine has them."""
    return [
        "--dev",
        "/dev",
        *[a for dev in sorted(Path("/dev").glob("nvidia*")) for a in ("--dev-bind", str(dev), str(dev))],
    ]


def isolated(
    argv: Sequence[str],
    *,
    writable: Sequence[Path],
    readable: Sequence[Path] = (),
    cwd: Path,
    network: bool = True,
    unset: Sequence[str] = (),
) -> list[str]:
    """``argv`` run in the isolated view (see the module's docstring): ``writable`` and ``readable`` the folders
    of this machine it shows at their own paths, ``cwd`` where it starts, ``unset`` the variables of the caller's
    environment it drops. Raises InstallError where bubblewrap is not installed."""
    program = shutil.which(SANDBOX)
    if program is None:
        raise InstallError(
            f"the fresh check boots the folder in an isolated view of this machine through bubblewrap ({SANDBOX}), "
            "which is not installed: apt-get install bubblewrap (the README's set-up does)"
        )
    shown: list[str] = []
    for path in writable:
        shown += ["--bind", str(path), str(path)]
    for path in readable:
        shown += ["--ro-bind", str(path), str(path)]
    return [
        program,
        "--die-with-parent",  # the checker gone (killed, crashed): the sandbox and all it runs go too
        "--unshare-pid",
        "--unshare-ipc",
        *([] if network else ["--unshare-net"]),
        *_system_binds(),
        *_devices(),
        "--proc",
        "/proc",
        *[a for folder in SCRATCH for a in ("--tmpfs", folder)],
        *shown,
        *[a for name in unset for a in ("--unsetenv", name)],
        "--chdir",
        str(cwd),
        "--",
        *argv,
    ]


def missing_paths(log: str, *, shown: Sequence[Path]) -> list[str]:
    """The absolute paths ``log`` says could not be opened, outside the folders the view ``shown``: what the stack
    looked for on this machine and the isolated view does not have."""
    found = dict.fromkeys(m.group(1).rstrip(".") for m in _MISSING.finditer(log))
    return [path for path in found if not any(Path(path).is_relative_to(folder) for folder in shown)]
