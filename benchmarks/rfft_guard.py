"""Per-call cost of the rfft_guard patch in warn mode, once the call site has been warned about.

The bare ``tf.signal.rfft`` and the guarded one run side by side in one process, interleaved
round by round so that drift (CPU frequency, caches) hits both alike; the guard alone is also
timed around a no-op, where nothing hides its cost. The machine is described as the affected
nvidia-tensorflow 1.15.5 build so the guard installs on any TensorFlow 2.x.
Goal: at most 2 µs per call.

    PYTHONPATH=. python benchmarks/rfft_guard.py
"""

from __future__ import annotations

import statistics
import time
import warnings
from typing import Callable, List

import tensorflow as tf

import tf_patches
from tf_patches.patches import rfft_guard

AFFECTED = {
    "distribution": "nvidia-tensorflow",
    "version": "1.15.5+nv22.12",
    "cuda_version": "12.0",
    "cudnn_version": "8.7",
    "gpus": [{"name": "NVIDIA GeForce RTX 4090", "compute_capability": "8.9"}],
}
ROUNDS = 30
CALLS = 300  # per round and variant
GOAL_US = 2.0


def per_call_us(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def side_by_side(bare: Callable[[], object], guarded: Callable[[], object], calls: int) -> List[List[float]]:
    """Per-call µs of each variant, one pair per round, the order alternating between rounds."""
    bare(), guarded()  # warm up (and warn, once)
    pairs = []
    for round_ in range(ROUNDS):
        if round_ % 2:
            g = per_call_us(guarded, calls)
            b = per_call_us(bare, calls)
        else:
            b = per_call_us(bare, calls)
            g = per_call_us(guarded, calls)
        pairs.append([b, g])
    return pairs


def show(what: str, pairs: List[List[float]]) -> float:
    bare = statistics.median(b for b, _ in pairs)
    guarded = statistics.median(g for _, g in pairs)
    overhead = statistics.median(g - b for b, g in pairs)
    print(f"{what:<28} bare {bare:8.2f} µs   guarded {guarded:8.2f} µs   "
          f"overhead {overhead:+6.2f} µs   ratio {guarded / bare:5.3f}")
    return overhead


def main() -> None:
    x = tf.random.uniform([4, 64])
    bare_rfft = tf.signal.rfft

    def noop(value: object) -> object:
        return value

    report = tf_patches.apply_all(env=AFFECTED, only=["rfft_guard"], rfft_guard="warn")
    assert report.rows[-1].status == "applied", report
    guarded_rfft = tf.signal.rfft
    guard = rfft_guard.Guard("warn", "benchmark", tf.device, rfft_guard.CallSites(()))
    guarded_noop = guard.wrap(noop, "noop")
    warnings.simplefilter("ignore", rfft_guard.UnsafeFFTWarning)

    print(f"TensorFlow {tf.__version__}; {ROUNDS} rounds x {CALLS} calls, medians")
    op = show("tf.signal.rfft [4x64] eager", side_by_side(lambda: bare_rfft(x), lambda: guarded_rfft(x), CALLS))
    alone = show("guard around a no-op", side_by_side(lambda: noop(x), lambda: guarded_noop(x), CALLS * 10))
    tf_patches.revert_all()
    verdict = "within" if max(op, alone) <= GOAL_US else "OVER"
    print(f"goal <= {GOAL_US} µs per call: {verdict}")


if __name__ == "__main__":
    main()
