"""Is an effect claim's holder process still running? Asked of holders on this host only.

A claim records its holder's pid and the process's start time (``pid_start``: Linux
``/proc/<pid>/stat`` field 22, clock ticks since boot). On the holder's own host a reader
can tell a dead holder at once, without waiting out its lease: no such pid, a zombie
(killed, not yet reaped), or a pid now running another process (another start time).
Anywhere the answer cannot be had (another OS, no ``/proc``), the holder counts as alive
and its lease decides, as before: a live holder is never taken for a dead one by guess.

"This host" is ``host_identity()``, what a claim records as its holder's host: the
hostname with the kernel's boot id and the process's pid namespace. A hostname alone is
not a host: containers with the host's network (or pods with ``hostNetwork``) share one,
and so may two machines; their pids mean nothing to each other, so a holder alive in one
would look gone from the other (no such pid, or another process's), and its claim would
read as abandoned while its body runs. Where they cannot be told (no ``/proc``, another
OS, or a ``/proc`` of another pid namespace, whose entries are not this process's pids)
the identity is this process's alone, so no other process's claim is ever read as one
of this host's: the lease decides. Claims written by an older version (a bare hostname)
never match either.
"""

from __future__ import annotations

import functools
import os
import socket
import uuid

__all__ = ["holder_gone", "host_identity", "process_start"]


@functools.cache
def host_identity() -> str:
    """This process's host as effect claims record it (see the module docstring):
    ``name [boot <first 8 of the boot id>, pid ns <inode>]``, or, where that cannot be
    told, ``name [process <random id>]``, which no other process shares."""
    name = socket.gethostname()
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
        ours = os.readlink("/proc/self") == str(os.getpid())  # /proc of our pid namespace
    except OSError:
        boot, namespace, ours = "", 0, False
    if not (ours and boot and namespace):
        return f"{name} [process {uuid.uuid4().hex[:12]}]"
    return f"{name} [boot {boot[:8]}, pid ns {namespace}]"


# A child forked into another pid namespace (unshare, then fork) must not keep ours.
if hasattr(os, "register_at_fork"):  # not on Windows, where nothing forks
    os.register_at_fork(after_in_child=host_identity.cache_clear)


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` from field 3 (state) on; None when unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # Field 2 (the command) is in parentheses and may hold spaces or ")": split after
    # the last one.
    return raw[raw.rfind(")") + 2 :].split()


def process_start(pid: int) -> int:
    """The start time of process ``pid`` in clock ticks since boot (0: not known)."""
    fields = _stat(pid)
    if fields is None or len(fields) < 20:
        return 0
    try:
        return int(fields[19])  # field 22; fields[0] is field 3
    except ValueError:
        return 0


def holder_gone(pid: int, pid_start: int) -> bool:
    """True when process ``pid`` (started at ``pid_start``, 0: not recorded) on this host
    is certainly not running: no such process, a zombie, or another process's start."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass  # it exists (another user's: PermissionError), or we cannot tell
    fields = _stat(pid)
    if fields is None:
        return False
    if fields and fields[0] in ("Z", "X"):
        return True  # killed, not yet reaped by its parent: it runs nothing
    if pid_start and len(fields) >= 20:
        try:
            return int(fields[19]) != pid_start
        except ValueError:
            return False
    return False
