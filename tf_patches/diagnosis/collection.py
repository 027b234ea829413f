"""Does a Python garbage collection release the growth? The evidence for "call ``gc.collect()``
after each model" (100 Keras models built in a loop: +662 MiB; with ``gc.collect()`` after each,
+122 MiB), measured without changing what the program does while it runs: a diagnosis that
collected garbage at every sample would cure what it measures.

The rule:

- **While it runs**, the collector is only *watched* (``gc.callbacks``): for each full
  (generation-2) collection the program's own collector makes, the objects it found and, where
  glibc is the allocator, how many heap bytes in use it freed (``mallinfo2`` before and after:
  ≈40 µs each, on the rare full collections only). Garbage that only full collections free piles
  up between them (by default one runs when the objects surviving younger collections grow by a
  quarter of the long-lived ones): a large ``gen2_freed_bytes`` per collection is memory the
  program holds as garbage at its peaks.
- **At stop** (the end of the program, or of the ``with`` block), one full collection, with RSS
  and the heap's in-use bytes before and after: how much garbage was waiting then. Nothing is
  trimmed, so ``rss_after`` shows what the process keeps (freed memory stays with the allocator:
  RSS rarely drops), ``heap_in_use_after`` what is live. Python's own objects live in pymalloc's
  arenas, outside the C heap's figures: ``python_blocks_*`` (``sys.getallocatedblocks``) count them.

Measured on benchmarks/diagnose_corpus/models_in_a_loop_30324.py (60 Keras 3 models, TF 2.21):
one full collection of the program's own in the whole run (it found nothing: with a million
objects alive after ``import tensorflow``, the next one waits for a quarter million more), and at
the end 23,476 objects, 7.6 MiB of heap in use (of ≈29 MiB the heap grew over the loop) and
48,782 Python blocks freed, RSS unchanged.

A program that builds models in cycles frees thousands of objects and megabytes of heap per
collection; a clean loop, next to nothing.
"""

from __future__ import annotations

import gc
import sys
import time
from typing import Any, Dict, Optional

from ..core.memory import resident_bytes
from .heap import in_use_and_held


def _python_blocks() -> Optional[int]:
    """Blocks Python's own allocator has handed out (its objects live outside the C heap's
    figures: pymalloc maps its arenas itself)."""
    try:
        return sys.getallocatedblocks()
    except Exception:
        return None


class CollectionWatch:
    """Watches the program's full collections from :meth:`start` to :meth:`stop`."""

    def __init__(self) -> None:
        self.gen2_collections = 0
        self.gen2_found = 0  # objects the full collections found unreachable
        self.gen2_freed_bytes: Optional[int] = None  # heap in use freed by them (glibc only)
        self.gen2_largest_freed_bytes: Optional[int] = None
        self._in_use_before: Optional[int] = None
        self._final: Dict[str, Any] = {}
        self._watching = False

    def reset(self) -> None:
        """Counts from now (a forked child); the callback stays."""
        self.gen2_collections = self.gen2_found = 0
        self.gen2_freed_bytes = self.gen2_largest_freed_bytes = None
        self._in_use_before, self._final = None, {}

    def start(self) -> "CollectionWatch":
        if not self._watching:
            gc.callbacks.append(self._callback)
            self._watching = True
        return self

    def stop(self) -> None:
        if self._watching:
            self._watching = False
            try:
                gc.callbacks.remove(self._callback)
            except ValueError:
                pass

    def _callback(self, phase: str, info: Dict[str, Any]) -> None:
        # Called by the collector in whichever thread it runs: cheap, and never raises.
        try:
            if info.get("generation") != 2:
                return
            if phase == "start":
                self._in_use_before = in_use_and_held()[0]
                return
            self.gen2_collections += 1
            self.gen2_found += int(info.get("collected") or 0)
            before, self._in_use_before = self._in_use_before, None
            after = in_use_and_held()[0] if before is not None else None
            if before is not None and after is not None:
                freed = max(0, before - after)
                self.gen2_freed_bytes = (self.gen2_freed_bytes or 0) + freed
                self.gen2_largest_freed_bytes = max(self.gen2_largest_freed_bytes or 0, freed)
        except Exception:
            pass

    def collect_once(self) -> None:
        """The one full collection at stop, measured (not counted among the program's own)."""
        self.stop()
        try:
            blocks_before = _python_blocks()
            rss_before, (in_use_before, _) = resident_bytes(), in_use_and_held()
            started = time.perf_counter()
            objects = gc.collect()
            seconds = time.perf_counter() - started
            rss_after, (in_use_after, _) = resident_bytes(), in_use_and_held()
            blocks_after = _python_blocks()
        except Exception:
            return
        self._final = {"at": round(time.time(), 3), "objects": objects, "seconds": round(seconds, 4),
                       "rss_before": rss_before, "rss_after": rss_after,
                       "heap_in_use_before": in_use_before, "heap_in_use_after": in_use_after,
                       "python_blocks_before": blocks_before, "python_blocks_after": blocks_after}

    def to_dict(self) -> Dict[str, Any]:
        """The snapshot's ``"collection"``: the program's full collections so far, and the one at
        stop once it ran (``at``, ``objects``, ``rss_*``, ``heap_in_use_*``)."""
        try:
            threshold = list(gc.get_threshold())
            enabled = gc.isenabled()
        except Exception:
            threshold, enabled = None, None
        return {"gen2_collections": self.gen2_collections, "gen2_found": self.gen2_found,
                "gen2_freed_bytes": self.gen2_freed_bytes,
                "gen2_largest_freed_bytes": self.gen2_largest_freed_bytes,
                "threshold": threshold, "enabled": enabled, **self._final}
