"""The one process supervisor of tf-patches' tools: process trees found through ``/proc``
(Linux), ended one way whatever they are (:func:`end`: SIGTERM, ``GRACE_S`` to exit cleanly,
SIGKILL, ``SETTLE_S`` for the kernel), and a command's exit status passed on as a shell would.

Two kinds of tree: a :class:`Group` is a process that leads a session of its own and the groups
its descendants made (:mod:`.local`: one per isolated call); :class:`Marked` is every process
whose environment carries a variable of the run (``tf-patches diagnose`` and ``repro``: the
command shares our process group, so that a terminal's Ctrl-C reaches it, and what it leaves is
found wherever it was re-parented). :func:`supervise` watches such a command to its end while
:class:`Signals` forwards SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 to it and ignores SIGINT and
SIGQUIT here (the terminal sends them to the command's group already: a Ctrl-C still gets its
report).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Collection, Dict, List, NamedTuple, Optional, Set, Tuple

GRACE_S = 2.0  # SIGTERM, then this long to exit cleanly (flush, atexit), then SIGKILL
SETTLE_S = 2.0  # after SIGKILL: how long to wait for the kernel to take the members away
POLL_S = 0.05  # how often to look whether what was signalled is gone
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


def table() -> Dict[int, Process]:
    """Every process of the machine by pid; ``OSError`` where there is no ``/proc``."""
    found = {}
    for entry in os.listdir("/proc"):
        process = _read(int(entry)) if entry.isdigit() else None
        if process is not None:
            found[int(entry)] = process
    return found


def _read(pid: int) -> Optional[Process]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
        # The name, in parentheses, may hold spaces and parentheses: the fields follow the last ')'.
        state, parent, group, session = text[text.rindex(b")") + 2:].split()[:4]
        return Process(state.decode("ascii", "replace"), int(parent), int(group), int(session))
    except (OSError, ValueError, IndexError):
        return None  # gone since the listing


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


def tree(root: int, processes: Optional[Dict[int, Process]] = None) -> List[int]:
    """``root`` and its descendants, ``root`` first: from ``/proc`` on Linux, psutil elsewhere,
    else ``root`` alone."""
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
    found, seen, stack = [], {root}, [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(child for child in children.get(pid, ()) if child not in seen)
        seen.update(children.get(pid, ()))
    return found


def descendant_groups(root: int) -> Set[int]:
    """The process groups of ``root``'s live descendants (sessions or groups they made: a nested
    ``map_isolated``'s items, a daemon); empty without ``/proc``. Never a group of this process's
    own session (a descendant started before ``root`` left it)."""
    try:
        processes = table()
    except OSError:
        return set()
    own_session = os.getsid(0)
    return {processes[pid].group for pid in tree(root, processes)[1:]
            if processes[pid].state != "Z" and processes[pid].session != own_session}


def any_group_alive(groups: Collection[int]) -> bool:
    """Whether any of ``groups`` has a member that is not a zombie (a zombie is dead already: its
    new parent, often init, reaps it; an init that never reaps must not make us wait)."""
    signallable = [group for group in groups if _signallable(group)]
    if not signallable:
        return False
    try:
        members = {process.group for process in table().values() if process.state != "Z"}
    except OSError:
        return True  # no /proc: the signal's answer
    return any(group in members for group in signallable)


def _signallable(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):  # gone; or only members we may not signal
        return False
    return True


class Group:
    """A child that leads a session of its own, with the groups its descendants made (a nested
    ``map_isolated``'s items lead sessions of their own: ended with it, or orphaned when its
    SIGKILL comes first). ``exited()`` says whether the child is reaped (its pid no longer its)."""

    def __init__(self, pid: int, exited: Callable[[], bool]):
        self.pid, self.exited, self.groups = pid, exited, {pid}

    def signal(self, number: int) -> None:
        if not self.exited():
            self.groups |= descendant_groups(self.pid)
        for group in self.groups:
            try:
                os.killpg(group, number)
            except ProcessLookupError:  # gone; or, the child's own, not made yet: the child alone
                if group == self.pid and not self.exited():
                    _kill(self.pid, number)
            except PermissionError:
                pass

    def alive(self) -> bool:
        return not self.exited() or any_group_alive(self.groups)


class Marked:
    """Every live process whose environment carries ``variable=value`` (a run's own folder):
    what a command started, wherever it was re-parented (Linux)."""

    def __init__(self, variable: str, value: str):
        self.marker = f"{variable}={value}".encode()
        self.pids: List[int] = []

    def signal(self, number: int) -> None:
        self.pids = marked(self.marker)
        for pid in self.pids:
            _kill(pid, number)

    def alive(self) -> bool:
        self.pids = [pid for pid in self.pids if alive(pid)]
        return bool(self.pids)


def marked(marker: bytes) -> List[int]:
    """The live processes (not zombies, not this one) whose environment holds ``marker``."""
    try:
        processes = table()
    except OSError:
        return []
    found = []
    for pid, process in processes.items():
        if pid == os.getpid() or process.state == "Z":
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if marker in environ.read().split(b"\0"):
                    found.append(pid)
        except OSError:  # gone, or another user's
            continue
    return found


def _kill(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except OSError:
        pass


def end(processes: Any) -> None:
    """End ``processes`` (a :class:`Group` or :class:`Marked`): SIGTERM, up to ``GRACE_S`` for
    them to go, SIGKILL to what is left, up to ``SETTLE_S`` for the kernel to take it away."""
    for number, wait_s in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, SETTLE_S)):
        processes.signal(number)
        deadline = time.monotonic() + wait_s
        while processes.alive():
            if time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
        else:
            return


def supervise(child: subprocess.Popen, signals: "Signals", leftovers: Marked, timeout: Optional[float] = None,
              every: Optional[float] = None, tick: Optional[Callable[[], None]] = None) -> Tuple[int, bool]:
    """Watch a command to its end: ``signals`` forwarded to it, ``tick()`` every ``every``
    seconds; past ``timeout`` seconds its whole tree is ended. Then what it left running is
    ended too. Its return code (negative: the signal that ended it), and whether it timed out."""
    signals.started(child)
    deadline = None if timeout is None else time.monotonic() + timeout
    timed_out = False
    while True:
        waits = [wait_s for wait_s in (every, None if deadline is None else deadline - time.monotonic())
                 if wait_s is not None]
        try:
            returncode = child.wait(timeout=max(0.0, min(waits)) if waits else None)
            break
        except subprocess.TimeoutExpired:
            if deadline is not None and time.monotonic() >= deadline:
                timed_out = True
                end(leftovers)  # the command and all it started
                returncode = child.wait()
                break
            if tick is not None:
                tick()
    end(leftovers)
    signals.between()
    return returncode, timed_out


class Signals:
    """While a command runs: forward what a process manager sends us, ignore the terminal's (a
    no-op handler, not SIG_IGN, which the command would inherit); restored on exit. A signal that
    whoever started us made ignored stays so, for us and for the command."""

    def __init__(self) -> None:
        self._child: Optional[subprocess.Popen] = None
        self._pending: List[int] = []
        self._saved: Dict[int, Any] = {}
        self.received: List[int] = []  # every signal that reached us, forwarded or not

    def __enter__(self) -> "Signals":
        if threading.current_thread() is not threading.main_thread():
            return self  # only the main thread may set handlers (main() called from a thread)
        for names, handler in ((FORWARDED, self._forward), (IGNORED, self._ignore)):
            for name in names:
                number = getattr(signal, name, None)
                if number is not None and signal.getsignal(number) != signal.SIG_IGN:
                    self._saved[number] = signal.signal(number, handler)
        return self

    def between(self) -> None:
        """The command has ended and another may start (``--verify``, repro's next run): what
        arrives meanwhile waits for it, as before the first start."""
        self._child = None

    def started(self, child: subprocess.Popen) -> None:
        self._child = child
        pending, self._pending = self._pending, []
        for number in pending:  # arrived while the command was starting
            self._forward(number, None)

    def _forward(self, number: int, frame: Any) -> None:
        self.received.append(number)
        if self._child is None:
            self._pending.append(number)
            return
        try:
            self._child.send_signal(number)  # a no-op once the child is reaped
        except OSError:
            pass

    def _ignore(self, number: int, frame: Any) -> None:
        """The terminal's Ctrl-C reached the command too: its death (or not) decides what we do
        (and, noted, that no further run follows)."""
        self.received.append(number)

    def __exit__(self, *exc_info: Any) -> None:
        for number, handler in self._saved.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)


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
    _kill(os.getpid(), number)  # delivered before kill returns: this thread does not block it
    return 128 + number  # a signal whose default is not to die (or we could not)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
