"""What is left of a process tree, and how it is ended: the process table read from ``/proc``
(Linux), whether a process group still has a live member, and the grace between the SIGTERM
that asks a group to go and the SIGKILL that makes it. Shared by :mod:`.local` (a process group
per isolated call) and ``tf-patches diagnose`` (what a command leaves behind)."""

from __future__ import annotations

import os
from typing import Collection, Dict, NamedTuple, Optional, Set

GRACE_S = 2.0  # SIGTERM, then this long to exit cleanly (flush, atexit), then SIGKILL
SETTLE_S = 2.0  # after SIGKILL: how long to wait for the kernel to take the members away


class Process(NamedTuple):
    state: str  # "R", "S", ...; "Z": a zombie, dead, only waiting to be reaped
    parent: int
    group: int
    session: int = 0


def table() -> Dict[int, Process]:
    """Every process of the machine by pid; ``OSError`` where there is no ``/proc``."""
    processes = {}
    for entry in os.listdir("/proc"):
        process = _read(int(entry)) if entry.isdigit() else None
        if process is not None:
            processes[int(entry)] = process
    return processes


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process and not a zombie (Linux; elsewhere: whether it exists)."""
    if os.path.isdir("/proc"):
        process = _read(pid)
        return process is not None and process.state != "Z"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _read(pid: int) -> Optional[Process]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
        # The name, in parentheses, may hold spaces and parentheses: the fields follow the last ')'.
        state, parent, group, session = text[text.rindex(b")") + 2:].split()[:4]
        return Process(state.decode("ascii", "replace"), int(parent), int(group), int(session))
    except (OSError, ValueError, IndexError):
        return None  # gone since the listing


def descendant_groups(root: int, processes: Optional[Dict[int, Process]] = None) -> Set[int]:
    """The process groups of ``root``'s live descendants (sessions or groups they made: a nested
    ``map_isolated``'s items, a daemon); empty without ``/proc``. Never a group of this process's
    own session (a descendant started before ``root`` left it)."""
    try:
        processes = table() if processes is None else processes
    except OSError:
        return set()
    children: Dict[int, list] = {}
    for pid, process in processes.items():
        children.setdefault(process.parent, []).append(pid)
    groups: Set[int] = set()
    own_session = os.getsid(0)
    seen, stack = {root}, list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        if processes[pid].state != "Z" and processes[pid].session != own_session:
            groups.add(processes[pid].group)
        stack.extend(children.get(pid, ()))
    return groups


def any_group_alive(groups: Collection[int]) -> bool:
    """Whether any of ``groups`` has a live member (one read of the process table)."""
    alive = [group for group in groups if _signallable(group)]
    if not alive:
        return False
    try:
        members = {process.group for process in table().values() if process.state != "Z"}
    except OSError:
        return True  # no /proc: the signal's answer
    return any(group in members for group in alive)


def _signallable(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):  # gone; or only members we may not signal
        return False
    return True


def group_alive(group: int) -> bool:
    """Whether process group ``group`` has a member that is not a zombie (a zombie is dead
    already: its new parent, often init, reaps it; an init that never reaps must not make us
    wait)."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # only members we may not signal: nothing more we could do to them
        return False
    try:
        return any(process.group == group and process.state != "Z" for process in table().values())
    except OSError:
        return True  # no /proc: the signal's answer
