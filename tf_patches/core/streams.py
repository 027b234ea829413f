"""Writing to stdout and stderr from the command line without breaking on them: a stream closed
before we started (``2>&-``: Python's ``sys.stderr`` is then None, and ``print(file=None)``
would write to stdout instead) or whose reader has gone (``| head``) loses what was for it, and
nothing else."""

from __future__ import annotations

import os
from typing import Optional, TextIO


def write(stream: Optional[TextIO], text: str) -> bool:
    """Write ``text`` to ``stream`` and flush it; False where it could not be written."""
    if stream is None:
        return False
    try:
        stream.write(text)
        stream.flush()
        return True
    except BrokenPipeError:
        _discard(stream)
        return False
    except (OSError, ValueError):  # ValueError: a closed file object
        return False


def _discard(stream: TextIO) -> None:
    """The reader has gone: what is still buffered would fail again when the interpreter
    flushes at exit (``Exception ignored ... BrokenPipeError``); send the rest to /dev/null, as
    Python's own documentation advises for SIGPIPE."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError):
        pass
