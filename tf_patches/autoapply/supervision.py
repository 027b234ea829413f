"""A command run as a child and watched to its end, as ``tf-patches diagnose`` and ``tf-patches
repro`` run it (``tf-patches run`` ``exec``\\s instead): signals forwarded or ignored while it runs,
what it leaves running ended, its exit status (or signal death) passed on, and the report file
checked before the command starts.

SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 are forwarded to the command; SIGINT and SIGQUIT are ignored
here while it runs (the terminal sends them to the command's process group already), so a Ctrl-C
still gets its report.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Any, Dict, List, Optional

from ..isolation import processes

FORWARDED = ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2")  # what process managers send to us
IGNORED = ("SIGINT", "SIGQUIT")  # what a terminal sends to the whole foreground group
# Signals whose default action dumps core: our dump would be noise next to the command's own.
_CORE_SIGNALS = ("SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE", "SIGSEGV", "SIGSYS",
                 "SIGXCPU", "SIGXFSZ")


def unwritable(path: str) -> Optional[str]:
    """Why a report could not be written to ``path`` at the end, found out now: the file is
    created (and removed again: it is written whole at the end) or, when it exists, opened for
    appending, which changes nothing in it."""
    if not path.strip():
        return "a file name is needed"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"no such folder: {folder}"
    if os.path.isdir(path):
        return "is a folder"
    existed = os.path.lexists(path)
    if existed and not os.path.isfile(path):  # a device (/dev/full), a FIFO (would block), a broken link
        return "not a regular file"
    try:
        with open(path, "a", encoding="utf-8"):
            pass
        if not existed:
            os.remove(path)
    except OSError as exc:
        return f"cannot write it: {exc.strerror or exc}"
    return None


def end_leftovers(variable: str, value: str) -> None:
    """End what the command left running when it ended (background jobs, daemons, workers its
    death orphaned): every process whose environment carries ``variable=value`` (the run's own
    evidence folder), wherever it was re-parented. SIGTERM, ``GRACE_S`` to go, then SIGKILL. Linux
    (``/proc``)."""
    marker = f"{variable}={value}".encode()
    for number, wait_s in ((signal.SIGTERM, processes.GRACE_S), (signal.SIGKILL, processes.SETTLE_S)):
        left = marked(marker)
        for pid in left:
            try:
                os.kill(pid, number)
            except OSError:
                pass
        deadline = time.monotonic() + wait_s
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = [pid for pid in left if processes.alive(pid)]
        if not left:
            return


def marked(marker: bytes) -> List[int]:
    """The live processes (not zombies) whose environment holds ``marker`` (``NAME=value``)."""
    try:
        table = processes.table()
    except OSError:
        return []
    found = []
    for pid, process in table.items():
        if pid == os.getpid() or process.state == "Z":
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if marker in environ.read().split(b"\0"):
                    found.append(pid)
        except OSError:  # gone, or another user's
            continue
    return found


class Signals:
    """While the command runs: forward what a process manager sends us, ignore the terminal's
    (a no-op handler, not SIG_IGN, which the command would inherit); restored on exit. A signal
    that whoever started us made ignored stays so, for us and for the command."""

    def __init__(self) -> None:
        self._child: Optional[subprocess.Popen] = None
        self._pending: List[int] = []
        self._saved: Dict[int, Any] = {}
        self.received: List[int] = []  # every signal that reached us, forwarded or not

    def __enter__(self) -> "Signals":
        if threading.current_thread() is not threading.main_thread():
            return self  # only the main thread may set handlers (main() called from a thread)
        for name, handler in [(name, self._forward) for name in FORWARDED] + [(name, self._ignore) for name in IGNORED]:
            number = getattr(signal, name, None)
            if number is not None and signal.getsignal(number) != signal.SIG_IGN:
                self._saved[number] = signal.signal(number, handler)
        return self

    def between(self) -> None:
        """The command has ended and another run is about to start (``--verify``): what arrives
        meanwhile waits for it, as before the first start."""
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
        (and, noted, that no ``--verify`` run follows)."""
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
    import sys

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
    try:
        os.kill(os.getpid(), number)  # delivered before kill returns: this thread does not block it
    except OSError:
        pass
    return 128 + number  # a signal whose default is not to die (or we could not)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
