"""Files written atomically (checkpoints, ZeRO rank files): into a temporary file beside the target, synced, then
renamed over it, so a crash mid-write leaves the old file. A temporary is named
``.rlx-gpu-ckpt.<host>.<pid>.<random>.npz``; one that a killed process left behind (``kill -9`` mid-save) is removed
by the next write into the same folder, and only when it is stale: written on this host by a process that no
longer runs, or (another host's, or an older version's ``.rlx-gpu-ckpt-<random>.npz``) untouched for a day. Any
error while writing removes the temporary and leaves the old file."""
from __future__ import annotations

import os
import re
import secrets
import socket
import time

__all__ = ["write_atomic", "remove_stale", "STALE_AGE"]

PREFIX = ".rlx-gpu-ckpt"
STALE_AGE = 24 * 3600.0  # seconds: a temporary whose writer cannot be asked is stale after a day untouched
_OURS = re.compile(r"^\.rlx-gpu-ckpt\.([A-Za-z0-9_-]{1,64})\.(\d{1,10})\.[0-9a-f]{8}\.npz$")
_OLD = re.compile(r"^\.rlx-gpu-ckpt-[A-Za-z0-9_]{8}\.npz$")  # (tempfile.mkstemp's, before this module)


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname().split(".")[0])[:64] or "host"


def _gone(pid: int) -> bool:
    """Whether no process ``pid`` runs on this host (POSIX only; elsewhere we cannot tell, so never)."""
    if os.name != "posix" or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # (it exists, as another user's)
        return False
    return False


def _stale(name: str, folder: str, now: float) -> bool:
    m = _OURS.match(name)
    if m is None and not _OLD.match(name):
        return False  # not ours
    if m is not None and m.group(1) == _host() and int(m.group(2)) != os.getpid():
        return _gone(int(m.group(2)))
    try:
        return now - os.stat(os.path.join(folder, name)).st_mtime > STALE_AGE
    except OSError:
        return False


def remove_stale(folder: str) -> list:
    """Remove the stale temporaries of ours in ``folder`` (see the module docstring); returns their names."""
    now, out = time.time(), []
    try:
        names = [e.name for e in os.scandir(folder) if e.name.startswith(PREFIX)]
    except OSError:
        return out
    for name in names:
        if _stale(name, folder, now):
            try:
                os.unlink(os.path.join(folder, name))
                out.append(name)
            except OSError:  # (gone already, or not ours to remove)
                pass
    return out


def write_atomic(path, write) -> None:
    """``write(f)`` into a temporary file beside ``path`` (opened binary), synced and renamed over ``path``; on any
    error the temporary is removed and ``path`` is as it was. Stale temporaries in that folder are removed first."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    remove_stale(folder)
    tmp = os.path.join(folder, f"{PREFIX}.{_host()}.{os.getpid()}.{secrets.token_hex(4)}.npz")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
