"""Files tf-patches writes for users (a report, a snapshot it reads back): whole or not at all."""

from __future__ import annotations

import os
import stat
import tempfile
from typing import Optional


def write_atomically(path: str, text: str, durable: bool = True) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file beside it, renamed over it once
    whole (and, ``durable``, on disk): a disk that fills or a file-size limit leaves the previous
    file as it was, and no temporary behind. ``OSError`` when it fails. The file keeps the mode
    of the one it replaces (a new one: 0o666 less the umask, as ``open`` gives); a symbolic link
    is written through, as ``open`` does."""
    target = os.path.realpath(path)
    fd, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp",
                                     dir=os.path.dirname(target))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            if durable:
                os.fsync(out.fileno())
        os.chmod(temporary, _mode_for(target))
        os.replace(temporary, target)
    except BaseException:
        try:
            os.remove(temporary)
        except OSError:
            pass
        raise


def unwritable(path: str) -> Optional[str]:
    """Why a report could not be written to ``path`` at the end, found out now (before a long
    command runs for nothing): the file is created (and removed again: it is written whole at
    the end) or, when it exists, opened for appending, which changes nothing in it."""
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


def _mode_for(target: str) -> int:
    try:
        return os.stat(target).st_mode & 0o7777
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """This process's umask, read without setting it (``os.umask`` sets it: racy with threads)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def read_regular_file(path: str, limit: int, whole: bool = True) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; ``ValueError`` for anything else (a
    FIFO, a device, ``/dev/zero``, a larger file), ``OSError`` where it cannot be read. Never blocks.
    ``whole=False``: the first ``limit`` bytes of a larger file (``/proc/cpuinfo`` on 256 cores)."""
    # stat before opening (opening a FIFO releases a writer waiting for a reader), fstat after in
    # case the path changed in between; O_NONBLOCK so that even then the open cannot wait.
    _check_regular(path, os.stat(path), limit if whole else None)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        _check_regular(path, os.fstat(fd), limit if whole else None)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)  # the file may have grown since fstat
    finally:
        os.close(fd)
    if len(data) > limit:
        if not whole:
            return data[:limit]
        raise ValueError(f"{path} is larger than {limit:,} bytes")
    return data


def _check_regular(path: str, status: os.stat_result, limit: Optional[int]) -> None:
    if not stat.S_ISREG(status.st_mode):
        raise ValueError(f"{path} is not a regular file")
    if limit is not None and status.st_size > limit:
        raise ValueError(f"{path} is larger than {limit:,} bytes")
