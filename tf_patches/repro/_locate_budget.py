"""``repro --locate``'s byte budget, kept while the digests are written (:mod:`._locate_tf`).

The in-graph digests are written by TF's own writer (``DebugIdentityV2``, in C++) from graphs
already built, many executions per Python call (a ``fit`` step, a ``while_loop``): stopping the
Python callback does not stop them, and closing TF's writer while graphs still write crashes the
process (measured: TF 2.21, a segmentation fault). So a watcher thread looks at the stream's size
every :data:`INTERVAL` seconds and, once it reaches the budget, points the writer's file
descriptor at ``/dev/null`` (``dup2``): TF keeps writing, nothing more lands on disk, and the
file keeps its first bytes (the reader stops at a record cut short). Linux (``/proc/self/fd``);
elsewhere the budget is only checked, and the report says the file may have grown past it.
Standard library only."""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Optional

INTERVAL = 0.02  # seconds between looks: the fastest stream measured here wrote ≈25 MB/s
_FD_FOLDER = "/proc/self/fd"


class ByteBudget:
    """Watches the file ``find()`` names (None until it exists); calls ``full(why)`` once when it
    reaches ``max_bytes``, after cutting it off where it can."""

    def __init__(self, find: Callable[[], Optional[str]], max_bytes: int, full: Callable[[str], None]) -> None:
        self.find, self.max_bytes, self.full = find, max_bytes, full
        self.reached = False
        self.pid = os.getpid()
        self._thread = threading.Thread(target=self._watch, name="tf-patches-locate-budget", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        path = None
        while not self.reached and os.getpid() == self.pid:
            time.sleep(INTERVAL)
            path = path or self.find()
            try:
                if path is not None and os.stat(path).st_size >= self.max_bytes:
                    self.cut(path)
            except OSError:
                pass

    def cut(self, path: str) -> None:
        """Nothing more of ``path`` reaches the disk (where the system allows), and ``full`` says why."""
        self.reached = True
        size = f"{self.max_bytes >> 20} MiB" if self.max_bytes >= 1 << 20 else f"{self.max_bytes} bytes"
        budget = f"the byte budget: {size} of digests"
        try:
            redirected = _redirect_to_null(path)
        except OSError:
            redirected = 0
        self.full(f"{budget}, later ones not written" if redirected else
                  f"{budget} (new graphs not instrumented; this system cannot stop TF's writer, so the file may "
                  "have grown past it)")


def _redirect_to_null(path: str) -> int:
    """Every descriptor of this process open on ``path`` now writes to ``/dev/null``; how many."""
    if not os.path.isdir(_FD_FOLDER):
        return 0
    real = os.path.realpath(path)
    null = os.open(os.devnull, os.O_WRONLY)
    count = 0
    try:
        for name in os.listdir(_FD_FOLDER):
            try:
                if os.readlink(os.path.join(_FD_FOLDER, name)) == real and int(name) != null:
                    os.dup2(null, int(name), inheritable=False)
                    count += 1
            except (OSError, ValueError):
                continue
    finally:
        os.close(null)
    return count


__all__ = ["ByteBudget", "INTERVAL"]
