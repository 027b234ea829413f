"""The one process supervisor of :mod:`.local`, ``tf-patches diagnose`` and ``repro``: process
trees read from ``/proc`` (Linux) and ended one way (:func:`end`), signals handled while children
run (:class:`Signals`), a command watched to its end (:func:`supervise`), exit statuses passed on
as a shell would."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import suppress
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

GRACE_S = 2.0  # SIGTERM, then this long to exit cleanly (flush, atexit), then SIGKILL
SETTLE_S = 2.0  # after SIGKILL: how long to wait for the kernel to take the members away
POLL_S = 0.05  # how often to look whether what was signalled is gone
WALK_S = 0.25  # how often a supervised command's tree is walked (one /proc scan, ≈1 ms per 100 processes)
FORWARDED = ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2")  # what process managers send to us
IGNORED = ("SIGINT", "SIGQUIT")  # what a terminal sends to the whole foreground group
# Signals whose default action dumps core: our dump would be noise next to the command's own.
_CORE_SIGNALS = ("SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE", "SIGSEGV", "SIGSYS",
                 "SIGXCPU", "SIGXFSZ")


class Process(NamedTuple):
    state: str  # "R", "S", ...; "Z": a zombie, dead, only waiting to be reaped
    parent: int
    group: int
    session: int = 0
    start: int = 0  # clock ticks after boot: a pid reused later is another process


def table() -> Dict[int, Process]:
    """Every process of the machine by pid; ``OSError`` where there is no ``/proc``."""
    found = {int(entry): _read(int(entry)) for entry in os.listdir("/proc") if entry.isdigit()}
    return {pid: process for pid, process in found.items() if process is not None}


def _read(pid: int) -> Optional[Process]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
        # The name, in parentheses, may hold spaces and parentheses: the fields follow the last ')'.
        fields = text[text.rindex(b")") + 2:].split()
        state, parent, group, session = fields[:4]
        return Process(state.decode("ascii", "replace"), int(parent), int(group), int(session), int(fields[19]))
    except (OSError, ValueError, IndexError):
        return None  # gone since the listing


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process and not a zombie (Linux)."""
    process = _read(pid)
    return process is not None and process.state != "Z"


def tree(root: int, processes: Optional[Dict[int, Process]] = None) -> List[int]:
    """``root`` and its descendants, ``root`` first (``/proc``; else psutil; else ``root`` alone)."""
    try:
        processes = table() if processes is None else processes
    except OSError:
        try:
            import psutil

            return [root] + [child.pid for child in psutil.Process(root).children(recursive=True)]
        except Exception:
            return [root]
    children: Dict[int, List[int]] = {}
    for pid, process in processes.items():
        children.setdefault(process.parent, []).append(pid)
    found = [root]
    for pid in found:  # grows as it is read; each parent's children once (a table read mid-change)
        found.extend(children.pop(pid, ()))
    return found


class Group:
    """An isolated call's child, which leads a session of its own, and the groups its descendants
    made (a nested ``map_isolated``'s items). ``exited()``: whether the child is reaped."""

    def __init__(self, pid: int, exited: Callable[[], bool]):
        self.pid, self.exited, self.groups = pid, exited, {pid}

    def signal(self, number: int) -> None:
        try:
            processes = {} if self.exited() else table()
        except OSError:  # no /proc: its own group only
            processes = {}
        # Never a group of our own session (a descendant started before the child left it).
        ours = os.getsid(0)
        self.groups |= {processes[pid].group for pid in tree(self.pid, processes)[1:]
                        if processes[pid].state != "Z" and processes[pid].session != ours}
        for group in self.groups:
            try:
                os.killpg(group, number)
            except ProcessLookupError:  # gone; or, the child's own, not made yet: the child alone
                if group == self.pid and not self.exited():
                    with suppress(OSError):
                        os.kill(self.pid, number)
            except PermissionError:
                pass

    def alive(self) -> bool:
        """The child, or a member of the groups that is neither a zombie nor beyond our signals."""
        if not self.exited():
            return True
        groups = [group for group in self.groups if _signallable(group)]
        if not groups:  # the usual end: no /proc scan
            return False
        try:
            return any(process.group in groups and process.state != "Z" for process in table().values())
        except OSError:
            return bool(groups)  # no /proc: the signal's answer


def _signallable(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):  # gone; or only members we may not signal
        return False
    return True


class Marked:
    """What a command started (in our process group: a terminal's Ctrl-C reaches it), wherever it
    went: every live process but this one whose environment carries ``variable=value``."""

    def __init__(self, variable: str, value: str):
        self.marker = f"{variable}={value}".encode()
        self.pids: List[int] = []

    def signal(self, number: int) -> None:
        try:
            processes = table()
        except OSError:
            processes = {}
        self.pids = self.find(processes)
        for pid in self.pids:
            with suppress(OSError):
                os.kill(pid, number)

    def find(self, processes: Dict[int, Process]) -> List[int]:
        """The live processes of ``processes`` but this one that carry the mark."""
        found = []
        for pid, process in processes.items():
            if pid == os.getpid() or process.state == "Z":
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as environ:
                    if self.marker in environ.read().split(b"\0"):
                        found.append(pid)
            except OSError:  # gone, or another user's
                continue
        return found

    def alive(self) -> bool:
        self.pids = [pid for pid in self.pids if alive(pid)]
        return bool(self.pids)


class Started:
    """Everything a supervised command started, whatever its environment: its tree (walked now
    while the command lives, and every :meth:`walk` while it ran, so a child that its parent left
    behind is still known), every process whose environment carries ``variable=value``, every
    process whose standard output or error is one of ``outputs`` (the run's own files: kept across
    ``env -i`` and double forks), and what any of those started since.

    Out of reach (no trace left to follow): a process that dropped the environment mark, does not
    write to the run's outputs (``diagnose`` gives its command ours) and whose parent exited before
    a walk saw it (a double fork within ``WALK_S``, a helper started in the command's last
    ``WALK_S``); and one that has become another user's."""

    def __init__(self, root: int, exited: Callable[[], bool], variable: str, value: str,
                 outputs: Sequence[str] = ()):
        self.root, self.exited = root, exited
        self.marked = Marked(variable, value)
        self.outputs = {identity for identity in map(_identity, outputs) if identity is not None}
        self.seen: Dict[int, int] = {}  # pid -> start time, of every process seen in the tree
        self.pids: Dict[int, int] = {}  # what the last signal went to

    def walk(self, processes: Optional[Dict[int, Process]] = None) -> None:
        """Note the command's tree as it is now (not once the command is reaped: its pid may be
        another process's then)."""
        if self.exited():
            return
        try:
            processes = table() if processes is None else processes
        except OSError:
            return
        for pid in tree(self.root, processes):
            if pid in processes:
                self.seen[pid] = processes[pid].start

    def signal(self, number: int) -> None:
        try:
            processes = table()
        except OSError:  # no /proc: the command alone, while it is not reaped
            if not self.exited():
                with suppress(OSError):
                    os.kill(self.root, number)
            return
        self.walk(processes)
        found = {pid for pid, start in self.seen.items() if pid in processes and processes[pid].start == start}
        found.update(self.marked.find(processes))
        if self.outputs:
            found.update(pid for pid in processes if self._writes_to_outputs(pid))
        mine = os.getpid()
        for pid in list(found):  # and what they started since the last walk
            found.update(tree(pid, processes))
        self.pids = {pid: processes[pid].start for pid in found
                     if pid in processes and pid != mine and processes[pid].state != "Z"}
        for pid in self.pids:
            with suppress(OSError):
                os.kill(pid, number)

    def _writes_to_outputs(self, pid: int) -> bool:
        if pid == os.getpid():
            return False
        for fd in (1, 2):
            try:
                if _identity(f"/proc/{pid}/fd/{fd}") in self.outputs:
                    return True
            except OSError:
                pass
        return False

    def alive(self) -> bool:
        live = {}
        for pid, start in self.pids.items():
            process = _read(pid)
            if process is not None and process.state != "Z" and process.start == start:
                live[pid] = start
        self.pids = live
        return bool(live) or not self.exited()


def _identity(path: str) -> Optional[Tuple[int, int]]:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def end(processes: Any) -> None:
    """End ``processes`` (a :class:`Group` or :class:`Marked`): SIGTERM, up to ``GRACE_S`` for
    them to go, SIGKILL to what is left, up to ``SETTLE_S`` for the kernel to take it away."""
    for number, wait_s in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, SETTLE_S)):
        processes.signal(number)
        deadline = time.monotonic() + wait_s
        while (left := processes.alive()) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if not left:
            return


def supervise(child: subprocess.Popen, signals: "Signals", leftovers: Any, timeout: Optional[float] = None,
              every: float = math.inf, tick: Callable[[], None] = lambda: None) -> Tuple[int, bool]:
    """Watch a command to its end (``signals`` forwarded, ``tick()`` every ``every`` s, its tree
    ended past ``timeout`` s), then end what it left (``leftovers``, a :class:`Started` or
    :class:`Marked`; a :class:`Started` is walked every ``WALK_S``): its return code, and whether
    it timed out."""
    signals.started(child)
    walk: Optional[Callable[[], None]] = getattr(leftovers, "walk", None)
    now = time.monotonic()
    deadline = math.inf if timeout is None else now + timeout
    next_tick, next_walk = now + every, (now + WALK_S if walk is not None else math.inf)
    timed_out = False
    while True:
        wait_s = min(next_tick, next_walk, deadline) - time.monotonic()
        try:
            returncode = child.wait(timeout=None if wait_s == math.inf else max(0.0, wait_s))
            break
        except subprocess.TimeoutExpired:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                end(leftovers)  # the command and all it started
                if child.poll() is None:  # it dropped the mark (exec'd with env -i): ended all the same
                    child.kill()
                returncode = child.wait()
                break
            if walk is not None and now >= next_walk:
                walk()
                next_walk = now + WALK_S
            if now >= next_tick:
                tick()
                next_tick = time.monotonic() + every
    end(leftovers)
    signals.between()
    return returncode, timed_out


class Signals:
    """While children run: each of ``forwarded`` passed on to the command (held until it starts),
    each of ``noted`` only noted (a terminal sends SIGINT and SIGQUIT to the command's group itself,
    so a Ctrl-C still gets its report); ``wake`` hears of each. Only default handlers are replaced."""

    def __init__(self, forwarded: Sequence[str] = FORWARDED, noted: Sequence[str] = IGNORED,
                 wake: Callable[[int], None] = lambda number: None) -> None:
        self._forwarded, self._noted, self._wake = forwarded, noted, wake
        self._child: Optional[subprocess.Popen] = None
        self._pending: List[int] = []
        self._saved: Dict[int, Any] = {}
        self.received: List[int] = []  # every signal that reached us, forwarded or not

    def __enter__(self) -> "Signals":
        if threading.current_thread() is threading.main_thread():  # only it may set handlers
            for number in (getattr(signal, name, None) for name in (*self._forwarded, *self._noted)):
                try:
                    if number is not None and signal.getsignal(number) in (signal.SIG_DFL, signal.default_int_handler):
                        self._saved[number] = signal.signal(number, self._forward)
                except (ValueError, OSError):  # not the main interpreter
                    pass
        return self

    def between(self) -> None:
        """The command has ended; what arrives before the next (``--verify``, repro) waits for it."""
        self._child = None

    def started(self, child: subprocess.Popen) -> None:
        self._child = child
        pending, self._pending = self._pending, []
        for number in pending:  # arrived while the command was starting
            self._send(number)

    def _forward(self, number: int, frame: Any) -> None:  # the handler: noted, forwarded if it is to be
        self.received.append(number)
        self._wake(number)
        if signal_name(number) in self._forwarded:
            self._send(number)

    def _send(self, number: int) -> None:
        if self._child is None:
            self._pending.append(number)
        else:
            try:
                self._child.send_signal(number)  # a no-op once the child is reaped
            except OSError:
                pass

    def __exit__(self, *exc_info: Any) -> None:
        for number, handler in self._saved.items():
            signal.signal(number, handler)


def shell_status(returncode: int) -> int:
    return returncode if returncode >= 0 else 128 - returncode  # as a shell's $?


def exit_like(returncode: int) -> int:
    """The command's exit status; for a signal death, the same death here (a shell then shows it
    as the command's, and stops a script on Ctrl-C), else 128+N as a shell's ``$?``."""
    if returncode >= 0:
        return returncode
    number = -returncode
    for stream in (sys.stdout, sys.stderr):  # os.kill leaves Python's buffers unwritten
        try:
            stream.flush()
        except Exception:
            pass
    try:
        if signal_name(number) in _CORE_SIGNALS:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    except (OSError, ValueError, ImportError):
        pass
    try:
        signal.signal(number, signal.SIG_DFL)
    except (OSError, ValueError):
        pass  # SIGKILL (SIGSTOP): no handler to reset, and its default is its own
    with suppress(OSError):
        os.kill(os.getpid(), number)  # delivered before kill returns: this thread does not block it
    return 128 + number  # a signal whose default is not to die (or we could not)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
