"""The command session of the tools that run a user's command (``tf-patches run``, ``diagnose``,
``repro``, ``testing.check_reproducible``): the environment it runs in, and one run of it started
and supervised to its end.

The environment (:func:`environment`): the bootstrap folder first on ``PYTHONPATH`` (so every
Python interpreter of the tree, multiprocessing workers included, runs its ``sitecustomize`` at
start-up), the :class:`~tf_patches.core.settings.Settings` as ``TF_PATCHES_*`` variables,
``--malloc`` preloaded, and the evidence a tool asks of each process (its variable from
:data:`tf_patches.session.bootstrap.EVIDENCE`, set to its folder).

A run (:func:`run`): the command started (or the exit status ``env`` and ``timeout`` give where it
cannot start: 126, 127), watched to its end by :func:`tf_patches.session.processes.supervise`
(signals forwarded, a ``timeout`` ending the whole tree), then everything it started ended: its
tree, every process carrying the run's mark in its environment (``TF_PATCHES_SESSION``, or the
evidence variable), every process writing to its output files. What came of it is a typed
:class:`Run`.
"""

from __future__ import annotations

import itertools
import math
import os
import stat
import subprocess
import sys
import time
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, TypeVar, Union

from ..core import streams
from ..core.settings import Settings
from . import allocator, processes
from .bootstrap import DIRECTORY as BOOTSTRAP_DIRECTORY
from .bootstrap import sitecustomize as bootstrap

EXIT_FAILED, EXIT_CANNOT_RUN, EXIT_NOT_FOUND = 125, 126, 127  # as `env` and `timeout` say them
EXIT_TIMED_OUT = 124  # as `timeout` says it
MARK_VARIABLE = "TF_PATCHES_SESSION"  # a run's mark, where it has no evidence folder to be found by
T = TypeVar("T")
_runs = itertools.count(1)


def environment(settings: Settings, evidence: Mapping[str, str] = {},
                base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The environment a command runs in with ``settings``: ``base`` (this process's environment
    by default), the bootstrap first on ``PYTHONPATH``, the settings' variables
    (:meth:`Settings.to_environ`), ``malloc`` preloaded, then ``evidence`` (a tool's variables, as
    :data:`tf_patches.session.bootstrap.EVIDENCE` names them). Raises
    :class:`allocator.AllocatorNotFound` for a ``malloc`` that is not installed."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = _first_on_path(BOOTSTRAP_DIRECTORY, env.get("PYTHONPATH", ""))
    if _start_reported_a_failing_sitecustomize():
        env[bootstrap.REPORTED_VARIABLE] = str(os.getpid())  # the PID a Python command keeps
    env.update(settings.to_environ())
    if settings.malloc:
        library = allocator.find(settings.malloc)
        # Ours first: the first library that defines malloc wins.
        env["LD_PRELOAD"] = " ".join([library, *env.get("LD_PRELOAD", "").split()])
    env.update(evidence)
    return env


class Run:
    """How one run of a command ended: ``returncode`` (negative: killed by that signal; None: it
    could not start), ``status`` (as a shell's ``$?``; 124 timed out; 126/127 could not start),
    ``timed_out``, ``seconds`` and the wall-clock window ``started_at``..``ended_at``."""

    def __init__(self) -> None:
        self.returncode: Optional[int] = None
        self.status = 0
        self.timed_out = False
        self.seconds = 0.0
        self.started_at = 0.0
        self.ended_at = 0.0

    @property
    def failed(self) -> bool:
        return self.status != 0

    @property
    def signal(self) -> Optional[str]:
        """The signal that killed it, by name, or None."""
        return processes.signal_name(-self.returncode) if (self.returncode or 0) < 0 else None

    def failure(self, program: str) -> str:
        """How it ended, in words: "exit status 0", "killed by SIGKILL", "timed out after 5 s"."""
        if self.returncode is None:
            return f"could not start (exit status {self.status})"
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s (ended by {program})"
        if self.returncode < 0:
            return f"killed by {processes.signal_name(-self.returncode)}"
        return f"exit status {self.returncode}"


def run(program: str, command: Sequence[str], env: Mapping[str, str], signals: Optional[processes.Signals] = None, *,
        mark: Optional[str] = None, stdin: Any = None, stdout: Any = None, stderr: Any = None,
        cwd: Optional[str] = None, timeout: Optional[float] = None, every: float = math.inf, tick: Callable[[int], None] = lambda pid: None,
        inherit_fds: bool = False, new_session: bool = False, result: Optional[Run] = None) -> Run:
    """Run ``command`` once in ``env``, to its end (or ``timeout`` s), supervised; ``tick(pid)``
    at its start and every ``every`` s while it runs. ``mark``: the variable of ``env`` that
    marks this run's processes (a tool's evidence variable, whose folder is the run's own); None:
    ``TF_PATCHES_SESSION``, set to a value of this run's. ``stdin``/``stdout``/``stderr``: files
    (None: inherited; ``subprocess.DEVNULL``); a process left writing to a regular output file is
    ended with the run.
    ``inherit_fds``: keep this process's other descriptors open in the command (``tf-patches
    run``'s exec keeps them). ``result``: the :class:`Run` (or a tool's subclass) to fill in."""
    done = Run() if result is None else result
    env = dict(env)
    if mark is None:
        mark = MARK_VARIABLE
        env[mark] = f"{os.getpid()}-{next(_runs)}-{time.time_ns()}"
    signals = processes.Signals() if signals is None else signals  # not entered: nothing to forward
    done.started_at = time.time()
    started = time.monotonic()
    child = start_or_status(program, command, lambda: subprocess.Popen(
        list(command), env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr, close_fds=not inherit_fds,
        start_new_session=new_session))
    if isinstance(child, int):
        done.status = child
        done.ended_at = time.time()
        return done
    tick(child.pid)
    outputs = [path for path in map(_regular_file, (stdout, stderr)) if path is not None]
    leftovers = processes.Started(child.pid, lambda: child.poll() is not None, mark, env[mark], outputs=outputs)
    done.returncode, done.timed_out = processes.supervise(child, signals, leftovers, timeout=timeout, every=every,
                                                          tick=lambda: tick(child.pid))
    done.seconds = time.monotonic() - started
    done.ended_at = time.time()
    done.status = EXIT_TIMED_OUT if done.timed_out else processes.shell_status(done.returncode)
    return done


def _regular_file(stream: Any) -> Optional[str]:
    """Where a run's output file can be found by what writes to it: a regular file's (its own, so
    whatever writes there is the run's), never a device's (``/dev/null`` is everyone's) or a pipe's."""
    try:
        path = f"/proc/self/fd/{stream.fileno()}"
        return path if stat.S_ISREG(os.fstat(stream.fileno()).st_mode) else None
    except (AttributeError, OSError, ValueError):  # None, subprocess.DEVNULL, a closed file
        return None


def start_or_status(program: str, command: Sequence[str], start: Callable[[], T]) -> Union[T, int]:
    """``start()`` (an exec, or a Popen), or, where the command cannot start, the exit status
    ``env`` and ``timeout`` give, after one line on stderr naming ``program``."""
    if not command[0]:  # execvpe and Popen raise ValueError/PermissionError for it; as for `env ""`
        say(program, "command not found: '' (an empty command name)")
        return EXIT_NOT_FOUND
    try:
        return start()
    except FileNotFoundError:
        say(program, f"command not found: {command[0]}")
        return EXIT_NOT_FOUND
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in an argument or variable
        say(program, f"cannot run {command[0]}: {exc}")
        return EXIT_CANNOT_RUN


def say(program: str, message: str) -> None:
    streams.write(sys.stderr, f"{program}: {message}\n")  # stderr closed: nowhere, not stdout


def _start_reported_a_failing_sitecustomize() -> bool:
    """Whether this interpreter's own start-up printed an error for a failing sitecustomize (the
    user's environment is ours too): Python's ``site`` does and then leaves none imported, and the
    bootstrap does when it started this interpreter (``TF_PATCHES_AUTO=1``)."""
    module = sys.modules.get("sitecustomize")
    if module is not None:
        return getattr(module, "hidden_failed", False) is True
    try:
        import importlib.util

        return not sys.flags.no_site and importlib.util.find_spec("sitecustomize") is not None
    except (ImportError, ValueError):
        return False


def _first_on_path(directory: str, path: str) -> str:
    if not path:
        return directory
    # Empty entries stay: in PYTHONPATH they mean the current directory.
    return os.pathsep.join([directory, *(entry for entry in path.split(os.pathsep) if entry != directory)])
