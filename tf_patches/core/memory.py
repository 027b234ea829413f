"""Resident memory and its growth over a loop: what a patch's canary, ``diagnose`` and the public
leak checks of :mod:`tf_patches.testing` measure, written once.

:func:`measure_growth` calls a function in a loop, reads the resident set size at evenly spaced
points after a warm-up and fits a slope in bytes per call: the number a leak report needs,
without a memory profiler. Importing this module imports neither TensorFlow nor NumPy.
"""

from __future__ import annotations

import gc
import os
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from .units import KIB, MIB as _MIB, signed

Progress = Callable[[int, int], None]


def resident_bytes(pid: Optional[int] = None) -> Optional[int]:
    """Resident memory of a process (this one by default), from ``/proc``; psutil elsewhere;
    None where neither can tell (a process gone, no psutil)."""
    try:
        with open(f"/proc/{pid or 'self'}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return int(psutil.Process(pid or os.getpid()).memory_info().rss)
    except Exception:
        return None


def rss_bytes() -> int:
    """Resident bytes of this process, now (not the peak that ``getrusage`` gives)."""
    found = resident_bytes()
    if found is None:
        raise RuntimeError("measuring memory needs /proc/self/statm (Linux) or psutil")
    return found


_trim: Optional[Callable[[], Any]] = None


def _trimmer() -> Callable[[], Any]:
    """glibc's ``malloc_trim(0)``, or a no-op where there is none (musl, macOS); looked up once."""
    global _trim
    if _trim is None:
        try:
            import ctypes

            trim = ctypes.CDLL(None).malloc_trim
            trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
            _trim = lambda: trim(0)  # noqa: E731
        except (AttributeError, OSError):
            _trim = lambda: None  # noqa: E731
    return _trim


def settle() -> None:
    """Free what is garbage, and give the C heap's free pages back to the OS: memory freed
    earlier (by other tests, say) would otherwise be reused by a leak and hide it from RSS."""
    gc.collect()
    _trimmer()()


def checked_count(name: str, value: Any, minimum: int) -> int:
    """``value`` if it is an integer ≥ ``minimum``, else a TypeError or ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


@dataclass(frozen=True)
class Growth:
    """RSS readings taken while a function was called in a loop.

    ``iterations[i]`` calls had been made when ``rss[i]`` bytes were resident; the first
    reading is taken before any call, the others from the end of the warm-up on.
    """

    iterations: Tuple[int, ...]
    rss: Tuple[int, ...]
    warmup: int
    seconds: float  # spent in the calls after warm-up (readings excluded)

    def _measured(self) -> List[Tuple[int, int]]:
        return [(n, rss) for n, rss in zip(self.iterations, self.rss) if n >= self.warmup]

    @property
    def slope(self) -> float:
        """Bytes per call: the least-squares slope of RSS over the readings after warm-up, so
        one allocator step (the heap grows in chunks) weighs less than in first-to-last."""
        points = self._measured()
        mean_x = sum(n for n, _ in points) / len(points)
        mean_y = sum(rss for _, rss in points) / len(points)
        spread = sum((n - mean_x) ** 2 for n, _ in points)
        return sum((n - mean_x) * (rss - mean_y) for n, rss in points) / spread

    @property
    def growth(self) -> int:
        """Bytes gained from the end of the warm-up to the last reading."""
        points = self._measured()
        return points[-1][1] - points[0][1]

    @property
    def calls(self) -> int:
        """Calls measured (after warm-up)."""
        return self.iterations[-1] - self.warmup

    @property
    def seconds_per_iteration(self) -> float:
        return self.seconds / self.calls

    def summary(self) -> str:
        return (f"{self.slope:,.1f} bytes per call ({self.slope * 1000 / _MIB:,.2f} MiB per 1,000 calls), "
                f"{signed(self.growth / _MIB, 2)} MiB over {self.calls:,} calls after {self.warmup:,} warm-up calls, "
                f"{self.seconds_per_iteration * 1e6:,.1f} µs per call")

    def table(self) -> str:
        """The readings, one per line: calls made, RSS, and the change since the end of warm-up."""
        base = self._measured()[0][1]
        lines = [f"{'calls':>10}  {'RSS MiB':>10}  {'since warm-up KiB':>18}"]
        for n, rss in zip(self.iterations, self.rss):
            since = f"{(rss - base) / 1024:+18,.0f}" if n >= self.warmup else f"{'(before warm-up)':>18}"
            lines.append(f"{n:>10,}  {rss / _MIB:>10,.1f}  {since}")
        return "\n".join(lines)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Growth":
        return cls(iterations=tuple(data["iterations"]), rss=tuple(data["rss"]),
                   warmup=int(data["warmup"]), seconds=float(data["seconds"]))


def measure_growth(fn: Callable[[], Any], iterations: int = 1000, warmup: int = 100, samples: int = 20, *,
                   progress: Optional[Progress] = None) -> Growth:
    """Call ``fn()`` ``warmup`` times, then ``iterations`` times more, reading RSS at ``samples``
    evenly spaced points from the end of the warm-up to the end (``samples=2``: before and after).

    Before each reading, garbage is collected, so that cyclic garbage Python would free later is
    not taken for a leak (objects alive before the loop are frozen first, which keeps each
    collection to microseconds), and the C heap's free pages go back to the OS (glibc
    ``malloc_trim``), so that a leak cannot hide in memory freed earlier in the process.
    ``progress(done, total)`` is called after each reading.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments, got {fn!r}")
    iterations = checked_count("iterations", iterations, minimum=1)
    warmup = checked_count("warmup", warmup, minimum=0)
    samples = checked_count("samples", samples, minimum=2)
    if samples > iterations + 1:
        raise ValueError(f"samples ({samples}) cannot exceed iterations + 1 ({iterations + 1})")
    marks = [warmup + round(i * iterations / (samples - 1)) for i in range(samples)]
    total = warmup + iterations
    freeze = gc.get_freeze_count() == 0  # someone else's freeze is left alone (we could not undo only ours)
    if freeze:
        gc.collect()
        gc.freeze()
    try:
        done, seconds = 0, 0.0
        settle()
        readings = [(0, rss_bytes())] if warmup else []
        for mark in marks:
            start = time.perf_counter()
            for _ in range(mark - done):
                fn()
            if done >= warmup:
                seconds += time.perf_counter() - start
            done = mark
            settle()
            readings.append((done, rss_bytes()))
            if progress is not None:
                progress(done, total)
    finally:
        if freeze:
            gc.unfreeze()
    return Growth(iterations=tuple(n for n, _ in readings), rss=tuple(rss for _, rss in readings),
                  warmup=warmup, seconds=seconds)
