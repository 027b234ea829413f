"""Advice ``tf-patches diagnose`` gives from what a process showed, not by default (issue 20).

The known leaks carry their own advice (each patch's ``signature``: the patch, the fix in
code, the fix upstream). This module gives the rest, each only on its evidence:

- **another allocator** where the C heap holds much more than it uses while RSS grows
  (fragmentation, the snapshot's ``heap``), and never the allocator the process already runs under
  (a report run under jemalloc used to say "try --malloc jemalloc");
- **``gc.collect()``** where a full collection released memory (the snapshot's ``collection``):
  Keras models and traced functions sit in reference cycles that wait for Python's collector;
- **``clear_session`` / a fresh process per model** where Keras models were built in a loop
  (``models_built``, ``clear_session_calls``);
- **a fresh process per fold** where the steady state still grows and nothing above explains it.

Every entry is ``{"kind", "text", "evidence"}``; the evidence is a sentence with the figures.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from .figures import MIB, format_size
from .snapshot import Snapshot

FRAGMENTED_BYTES = 64 * MIB  # held by the heap and not in use, at least
FRAGMENTED_SHARE = 0.25  # ... and this share of the growth
RELEASED_BYTES = 8 * MIB  # a collection that freed at least this (or RELEASED_SHARE of the growth)
RELEASED_SHARE = 0.20
MODELS_IN_A_LOOP = 3
ALLOCATORS = ("jemalloc", "tcmalloc")
FRESH_PROCESS = ("tf_patches.run_isolated(fn, ...) / tf_patches.map_isolated(fn, items), or "
                 "tf_patches.ray.map_isolated on Ray")


def _number(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _heap(snapshots: Sequence[Snapshot]) -> Dict[str, Any]:
    """The processes' heaps summed (each one's last word), and the allocators they run under."""
    allocators, in_use, held, known = set(), 0.0, 0.0, False
    for snap in snapshots:
        heap = snap.heap
        if not isinstance(heap, dict):
            continue
        if heap.get("allocator"):
            allocators.add(str(heap["allocator"]))
        used, kept = _number(heap.get("in_use_bytes")), _number(heap.get("held_bytes"))
        if used is not None and kept is not None:
            in_use, held, known = in_use + used, held + kept, True
    return {"allocators": sorted(allocators), "in_use": in_use if known else None, "held": held if known else None}


def _idle_growth(snapshots: Sequence[Snapshot]) -> Optional[float]:
    """How much the heap's kept-but-free part grew over the run (``heap_samples``: ``[time, in
    use, held]``), summed over the processes; None where no process measured it."""
    total, seen = 0.0, False
    for snap in snapshots:
        rows = [row for row in snap.heap_samples or ()
                if isinstance(row, (list, tuple)) and len(row) >= 3
                and _number(row[1]) is not None and _number(row[2]) is not None]
        if len(rows) >= 2:
            total += (rows[-1][2] - rows[-1][1]) - (rows[0][2] - rows[0][1])
            seen = True
    return total if seen else None


def _released(snapshots: Sequence[Snapshot]) -> Optional[float]:
    """Garbage waiting for a full collection, summed over the processes: what the one at the
    end released (heap in use where measured, else RSS), or the most one of the program's own
    full collections freed at once, whichever is more (garbage piles up between them)."""
    total, seen = 0.0, False
    for snap in snapshots:
        collection = snap.collection
        if not isinstance(collection, dict):
            continue
        before, after = _number(collection.get("heap_in_use_before")), _number(collection.get("heap_in_use_after"))
        if before is None or after is None:
            before, after = _number(collection.get("rss_before")), _number(collection.get("rss_after"))
        found = [max(0.0, before - after)] if before is not None and after is not None else []
        largest = _number(collection.get("gen2_largest_freed_bytes"))
        if largest is not None:
            found.append(largest)
        if found:
            total, seen = total + max(found), True
    return total if seen else None


def _total(counts: Sequence[Optional[int]]) -> Optional[int]:
    values = [count for count in counts if isinstance(count, int)]
    return sum(values) if values else None


def advise(snapshots: Sequence[Snapshot], growth: float, growing: bool, leaks_named: bool,
           command: str, explained: float = 0.0) -> List[Dict[str, str]]:
    """The advice the evidence supports. ``growing``: the steady state is not flat (or unknown
    with growth); ``leaks_named``: a known leak fired (its own advice is given with it);
    ``explained``: the bytes the known leaks explain."""
    advice: List[Dict[str, str]] = []
    heap = _heap(snapshots)
    idle = None if heap["held"] is None else heap["held"] - heap["in_use"]
    # Fragmentation: free heap kept, and growing, where the known leaks leave growth unexplained
    # (a Session.run leak of 200 MiB also leaves 160 MiB free in glibc's arenas: its fix is the fix).
    grew = _idle_growth(snapshots)
    bound = max(FRAGMENTED_BYTES, FRAGMENTED_SHARE * max(growth, 0.0))
    unexplained = max(0.0, growth - explained)
    if (growing and idle is not None and idle >= bound and (grew is None or grew >= bound)
            and unexplained >= FRAGMENTED_SHARE * max(growth, 0.0)):
        running = [name for name in heap["allocators"] if name in ALLOCATORS]
        others = [name for name in ALLOCATORS if name not in running]
        evidence = (f"the C heap holds {format_size(heap['held'])} and uses {format_size(heap['in_use'])}: "
                    f"{format_size(idle)} kept but free (fragmentation)")
        if others:
            advice.append({"kind": "allocator", "evidence": evidence,
                           "text": f"try another allocator: tf-patches run --malloc {others[0]} -- {command}"})
    released = _released(snapshots)
    if released is not None and released >= max(RELEASED_BYTES, RELEASED_SHARE * max(growth, 0.0)):
        advice.append({"kind": "gc", "evidence": f"a full garbage collection freed {format_size(released)} at once",
                       "text": "objects in reference cycles (models, traced functions, datasets) wait for "
                               "Python's collector: call gc.collect() after each model or fold"})
    models = _total([snap.models_built for snap in snapshots])
    clears = _total([snap.clear_session_calls for snap in snapshots])
    if models is not None and models >= MODELS_IN_A_LOOP and growing:
        each = f" (≈{format_size(growth / models)} of growth per model)" if growth > 0 else ""
        if not clears:
            advice.append({"kind": "clear_session",
                           "evidence": f"{models:,} Keras models were built{each} and clear_session() was never called",
                           "text": "call tf.keras.backend.clear_session() (and gc.collect()) between models, "
                                   f"or build each in a fresh process: {FRESH_PROCESS}"})
        else:
            advice.append({"kind": "fresh_process",
                           "evidence": f"{models:,} Keras models were built{each}, clear_session() called {clears:,} times",
                           "text": f"TF keeps some state per model that clear_session() does not free: "
                                   f"build each in a fresh process: {FRESH_PROCESS}"})
    if growing and not leaks_named and not advice:
        advice.append({"kind": "fresh_process", "evidence": "the steady state still grows and no known leak fired",
                       "text": f"run each fold or trial in a fresh process: {FRESH_PROCESS}"})
    return advice
