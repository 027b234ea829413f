"""Checks for your own code: does a function leak memory when called in a loop, and does a
script or function give bit-identical results in fresh processes?

- :func:`measure_growth` / :func:`assert_no_leak`: call a function in a loop, read the resident
  set size (``/proc/self/statm``) at evenly spaced points after a warm-up, and fit a slope in
  bytes per call — the number a leak report needs, without a memory profiler. The loop is
  :mod:`tf_patches.core.memory`'s, the one the patches' canaries and the benchmarks use.
- :func:`check_reproducible` / :func:`assert_reproducible`: run a script or an importable
  function in fresh interpreters with ``tf_patches.apply_all(deterministic=True, seed=...)``
  applied first, and compare what they produce bit for bit.
- :func:`repro` / :func:`assert_repeatable`: ``tf-patches repro`` as a function: run a command
  several times as it is (patches applied as ``tf-patches run`` applies them), compare its output
  and files, and say why runs differ (:mod:`tf_patches.repro`).

Importing this module imports neither TensorFlow nor NumPy (the pytest plugin loads it in
every test session); NumPy is loaded when results are compared.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

# The loop and its readings are the engine's (a patch's canary measures with them too).
from ..core.memory import Growth, Progress, measure_growth, rss_bytes
from .reproducible import (Difference, Reproduction, Target, assert_reproducible, check_reproducible,
                           child_environment)

__all__ = ["DEFAULT_MAX_BYTES_PER_ITER", "Growth", "Progress", "measure_growth", "rss_bytes", "assert_no_leak",
           "Target", "Difference", "Reproduction", "check_reproducible", "assert_reproducible",
           "child_environment", "repro", "assert_repeatable"]

DEFAULT_MAX_BYTES_PER_ITER = 1024


def assert_no_leak(fn: Callable[[], Any], max_bytes_per_iter: float = DEFAULT_MAX_BYTES_PER_ITER,
                   iterations: int = 1000, warmup: int = 100, samples: int = 20, *,
                   progress: Optional[Progress] = None) -> Growth:
    """:func:`measure_growth`, then raise ``AssertionError`` (showing the readings and the slope)
    when memory grows by more than ``max_bytes_per_iter`` bytes per call.

    Pick ``iterations`` so that the bound times the iterations is well above a few hundred KiB:
    the allocator grows the heap in steps of that size, which a short loop reads as a slope.
    """
    if isinstance(max_bytes_per_iter, bool) or not isinstance(max_bytes_per_iter, (int, float)):
        raise TypeError(f"max_bytes_per_iter must be a number of bytes, got {max_bytes_per_iter!r}")
    if not max_bytes_per_iter >= 0:
        raise ValueError(f"max_bytes_per_iter must be >= 0, got {max_bytes_per_iter!r}")
    result = measure_growth(fn, iterations, warmup, samples, progress=progress)
    if result.slope > max_bytes_per_iter:
        raise AssertionError(
            f"{_name(fn)} leaks: {result.summary()}; bound {max_bytes_per_iter:,} bytes per call.\n"
            f"{result.table()}"
        )
    return result


def repro(command: Sequence[str], runs: int = 2, **options: Any) -> Any:
    """``tf-patches repro`` as a function (:func:`tf_patches.repro.command.repro`): run
    ``command`` ``runs`` times, each a fresh process tree, and return the report: ``.verdict``
    (``"repeatable"``, ``"not repeatable"``, ``"not checked"`` where nothing could be compared),
    ``.repeatable``, ``.first_difference``, ``.causes`` (confirmed by experiment first, then
    suspects: ``.name``, ``.where``, ``.confirmed``, ``.fix``), ``.traps``, ``.to_dict()`` (the
    ``--json`` schema). Keywords: ``compare``, ``compare_stderr``, ``ignore``, ``timeout``,
    ``keep``, ``against`` (a report or a ``record`` file), ``verify``, ``experiments`` (at most that
    many; 0: none), ``locate``, ``record`` (a file for ``--locate --against`` elsewhere), ``options``
    (the runs' :class:`tf_patches.Settings`, or ``apply_all`` keywords checked as ``apply_all``
    checks them)."""
    from ..repro.command import repro as run_repro

    return run_repro(command, runs, **options)


def assert_repeatable(command: Sequence[str], runs: int = 2, **options: Any) -> Any:
    """:func:`repro`, raising ``AssertionError`` with the report (the first difference, and why)
    when the runs differ or could not be compared."""
    result = repro(command, runs, **options)
    if not result.repeatable:
        raise AssertionError(f"{' '.join(command)}: {result}")
    return result


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
