"""One run of ``tf-patches repro``: the command as a fresh process tree in its session
(:func:`tf_patches.session.command.run`, as ``diagnose`` runs its command), with
``TF_PATCHES_REPRO_DIR`` set (each Python process of the tree records its evidence there),
standard input from a file (what repro's own stdin held, read once by :func:`capture_stdin`: every
run gets the same) or ``/dev/null``, standard output and error kept to files: signals forwarded,
what the command leaves running ended, a ``--timeout`` ending the tree.

Output is kept as bytes decoded with ``errors="surrogateescape"``: two runs whose bytes differ
never read as the same text (``errors="replace"`` made any two invalid bytes one ``\ufffd``)."""

from __future__ import annotations

import os
import select
import stat
from dataclasses import dataclass
from typing import IO, Any, Dict, List, Optional, Sequence, Tuple, Union

from ..session import command as session, processes
from . import datafiles, evidence
from .masking import line_count

EXIT_TIMED_OUT = session.EXIT_TIMED_OUT


class Run(session.Run):
    """What one run did and left: how it ended (:class:`tf_patches.session.command.Run`: the
    return code, status, time-out, its clock's window) and what it wrote."""

    def __init__(self, number: int, folder: str) -> None:
        super().__init__()
        self.number = number
        self.folder = folder  # its own: stdout, stderr, evidence/, files/
        self.stdout = ""
        self.stderr = ""
        self.files: Dict[str, Optional[str]] = {}  # --compare path -> this run's copy
        self.processes: List[Dict[str, Any]] = []
        self.events: List[Dict[str, Any]] = []
        self.notes: List[str] = []

    def failure(self, program: str = "tf-patches repro") -> str:
        return super().failure(program)

    def pids(self) -> List[int]:
        return [data["pid"] for data in self.processes if isinstance(data.get("pid"), int)]

    def to_dict(self) -> Dict[str, Any]:
        return {"run": self.number, "exit_status": self.status,
                "signal": self.signal,
                "timed_out": self.timed_out, "seconds": round(self.seconds, 3),
                "started_at": round(self.started_at, 3), "ended_at": round(self.ended_at, 3),
                "stdout_lines": line_count(self.stdout), "processes": len(self.processes),
                "trap_events": len(self.events), "notes": list(self.notes)}


def run_once(command: Sequence[str], env: Dict[str, str], folder: str, number: int, compare: Sequence[str],
             timeout: Optional[float], signals: processes.Signals, cwd: Optional[str] = None,
             stdin: Optional[str] = None) -> Run:
    """Run ``command`` once, to its end (or ``timeout``), and read back what it left. ``stdin``:
    the file every run reads as its standard input (opened afresh for each run; see
    :func:`capture_stdin`), None: ``/dev/null``."""
    run = Run(number, folder)
    directory = os.path.join(folder, "evidence")
    os.makedirs(directory, exist_ok=True)
    env = dict(env, **{evidence.VARIABLE: directory})
    before = {path: datafiles.stamp(_at(path, cwd)) for path in compare}
    with open(os.path.join(folder, "stdout"), "wb") as out, open(os.path.join(folder, "stderr"), "wb") as err, \
            open(stdin if stdin is not None else os.devnull, "rb") as given:
        # The command and all it started: its tree, the evidence mark, and whatever holds its outputs.
        session.run("tf-patches repro", command, env, signals, mark=evidence.VARIABLE, stdin=given, stdout=out,
                    stderr=err, cwd=cwd, timeout=timeout, result=run)
    if run.returncode is None:
        return run
    run.stdout, run.stderr = _text(os.path.join(folder, "stdout")), _text(os.path.join(folder, "stderr"))
    run.processes, run.events = evidence.read(directory)
    for path in compare:
        where = _at(path, cwd)
        after = datafiles.stamp(where)
        if after is not None and after == before[path]:
            run.notes.append(f"{path} was not written by run {number} (unchanged since before it started)")
            run.files[path] = None
            continue
        run.files[path] = datafiles.keep(where, os.path.join(folder, "files", str(len(run.files))), run.notes)
    return run


def _at(path: str, cwd: Optional[str]) -> str:
    return os.path.join(cwd, path) if cwd and not os.path.isabs(path) else path


def _text(path: str) -> str:
    with open(path, "rb") as handle:  # bytes: a text read would turn a progress bar's \r into lines
        # surrogateescape: each byte that is not UTF-8 stays itself, so different bytes stay different
        return handle.read().decode("utf-8", errors="surrogateescape")


# -- standard input -----------------------------------------------------------------------------
PIPE_WAIT_S = 1.0  # how long a pipe may stay silent before repro stops waiting for more
STDIN_LIMIT = 1 << 30  # bytes read from a pipe at most (`yes | tf-patches repro ...` must end)


@dataclass(frozen=True)
class Stdin:
    """What every run gets as its standard input: ``path`` (a file holding it, read once from
    repro's own stdin) or None (``/dev/null``), and in words for the report."""

    path: Optional[str]
    description: str
    kind: str  # "file", "pipe", "terminal", "closed", "null", "other"
    size: int = 0  # bytes given to each run

    def to_dict(self) -> Dict[str, Any]:
        return {"kind": self.kind, "bytes": self.size, "description": self.description}


def capture_stdin(stream: Union[IO[Any], int, None], folder: str) -> Stdin:
    """Read repro's standard input once, whole, into ``folder``/stdin, so each run gets the same:
    a regular file (``< data.txt``) or a pipe (``cmd | tf-patches repro``). A pipe is read only
    while it has something to say within ``PIPE_WAIT_S`` (one held open by a parent with nothing
    in it must not hang repro). A terminal is never read (the runs would wait on the user), nor
    a device; either, or a closed stdin, gives the runs an empty one."""
    fd = _descriptor(stream)
    if fd is None:
        return Stdin(None, "none (closed): the runs got an empty stdin", "closed")
    try:
        info = os.fstat(fd)
    except OSError:
        return Stdin(None, "none (closed): the runs got an empty stdin", "closed")
    if os.isatty(fd):
        return Stdin(None, "a terminal: the runs got an empty stdin (tf-patches repro does not read a terminal)",
                     "terminal")
    try:
        return _captured(fd, info, os.path.join(folder, "stdin"))
    except OSError as exc:  # open for writing only, a read error: the runs get what a closed stdin gives
        return Stdin(None, f"unreadable ({exc.strerror or exc}): the runs got an empty stdin", "other")


def _captured(fd: int, info: os.stat_result, target: str) -> Stdin:
    if stat.S_ISREG(info.st_mode):
        size = _copy_file(fd, target)
        name = _name_of(fd) or "a file"
        return Stdin(target, f"{name} ({size:,} bytes), given to every run", "file", size)
    if stat.S_ISFIFO(info.st_mode) or stat.S_ISSOCK(info.st_mode):
        size, how = _copy_pipe(fd, target)
        what = "a pipe" if stat.S_ISFIFO(info.st_mode) else "a socket"
        if how == "ended":
            return Stdin(target, f"{what} ({size:,} bytes), given to every run", "pipe", size)
        if how == "limit":
            return Stdin(target, f"{what} (its first {size:,} bytes: more were coming), given to every run",
                         "pipe", size)
        if size:
            return Stdin(target, f"{what} ({size:,} bytes, then open with nothing more for {PIPE_WAIT_S:g} s: "
                                 "not waited on), given to every run", "pipe", size)
        return Stdin(None, f"{what} held open with nothing in it for {PIPE_WAIT_S:g} s: not waited on, the runs "
                           "got an empty stdin", "pipe")
    if stat.S_ISCHR(info.st_mode) and _is_null(info):
        return Stdin(None, "/dev/null: the runs got an empty stdin", "null")
    name = _name_of(fd) or "a device"
    return Stdin(None, f"{name} (not a file or a pipe): not read, the runs got an empty stdin", "other")


def _descriptor(stream: Union[IO[Any], int, None]) -> Optional[int]:
    if stream is None:
        return None
    if isinstance(stream, int):
        return stream
    try:
        return None if stream.closed else stream.fileno()
    except (OSError, ValueError, AttributeError):  # a closed or fileless stream (pytest's capture)
        return None


def _copy_file(fd: int, target: str) -> int:
    """A regular file from where its reader stands (as a command given ``< file`` reads it)."""
    size = 0
    with open(target, "wb") as out:
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return size
            out.write(chunk)
            size += len(chunk)


def _copy_pipe(fd: int, target: str) -> Tuple[int, str]:
    """What a pipe holds: (bytes read, "ended" | "silent" | "limit"). Each read waits for data at
    most ``PIPE_WAIT_S`` (select), so a writer that never writes or never closes cannot hang us."""
    size = 0
    with open(target, "wb") as out:
        while size < STDIN_LIMIT:
            readable, _, _ = select.select([fd], [], [], PIPE_WAIT_S)
            if not readable:
                return size, "silent"
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return size, "ended"
            out.write(chunk)
            size += len(chunk)
    return size, "limit"


def _name_of(fd: int) -> Optional[str]:
    """The file's name as the user gave it (its base name), where /proc says it."""
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    if not target.startswith("/") or target.endswith(" (deleted)"):
        return None  # "pipe:[123]", "socket:[...]", a removed file
    return os.path.basename(target) if os.path.dirname(target) == os.getcwd() else target


def _is_null(info: os.stat_result) -> bool:
    try:
        null = os.stat(os.devnull)
    except OSError:
        return False
    return info.st_rdev == null.st_rdev
