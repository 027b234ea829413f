"""Checks for your own code: does a function leak memory when called in a loop, and does a
script or function give bit-identical results in fresh processes?

- :func:`measure_growth` / :func:`assert_no_leak`: call a function in a loop, read the resident
  set size (``/proc/self/statm``) at evenly spaced points after a warm-up, and fit a slope in
  bytes per call — the number a leak report needs, without a memory profiler.
- :func:`check_reproducible` / :func:`assert_reproducible`: run a script or an importable
  function in fresh interpreters with ``tf_patches.apply_all(deterministic=True, seed=...)``
  applied first, and compare what they produce bit for bit.

Importing this module imports neither TensorFlow nor NumPy (the pytest plugin loads it in
every test session); NumPy is loaded when results are compared.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

DEFAULT_MAX_BYTES_PER_ITER = 1024
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_MODULE_FUNCTION = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_MIB = 1024 * 1024

Progress = Callable[[int, int], None]
Target = Union[str, "os.PathLike[str]", Callable[[], Any]]  # a script, "module:function" or a function


def rss_bytes() -> int:
    """Resident bytes of this process, now (not the peak that ``getrusage`` gives)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * _PAGE_SIZE
    except OSError as exc:
        raise RuntimeError(f"measuring memory needs /proc/self/statm (Linux): {exc}") from None


def _trimmer() -> Callable[[], Any]:
    """glibc's ``malloc_trim(0)``, or a no-op where there is none (musl, macOS)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return lambda: None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


def _settle() -> None:
    """Free what is garbage, and give the C heap's free pages back to the OS: memory freed
    earlier (by other tests, say) would otherwise be reused by a leak and hide it from RSS."""
    gc.collect()
    _TRIM()


_TRIM = _trimmer()


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
                f"{self.growth / _MIB:+,.2f} MiB over {self.calls:,} calls after {self.warmup:,} warm-up calls, "
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
    evenly spaced points from the end of the warm-up to the end.

    Before each reading, garbage is collected, so that cyclic garbage Python would free later is
    not taken for a leak (objects alive before the loop are frozen first, which keeps each
    collection to microseconds), and the C heap's free pages go back to the OS (glibc
    ``malloc_trim``), so that a leak cannot hide in memory freed earlier in the process.
    ``progress(done, total)`` is called after each reading.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments, got {fn!r}")
    iterations = _count("iterations", iterations, minimum=1)
    warmup = _count("warmup", warmup, minimum=0)
    samples = _count("samples", samples, minimum=2)
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
        _settle()
        readings = [(0, rss_bytes())] if warmup else []
        for mark in marks:
            start = time.perf_counter()
            for _ in range(mark - done):
                fn()
            if done >= warmup:
                seconds += time.perf_counter() - start
            done = mark
            _settle()
            readings.append((done, rss_bytes()))
            if progress is not None:
                progress(done, total)
    finally:
        if freeze:
            gc.unfreeze()
    return Growth(iterations=tuple(n for n, _ in readings), rss=tuple(rss for _, rss in readings),
                  warmup=warmup, seconds=seconds)


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


@dataclass(frozen=True)
class Difference:
    """How run ``run`` differs from run 1 in one tensor (runs are numbered from 1)."""

    run: int
    name: str
    message: str


@dataclass(frozen=True)
class Reproduction:
    """What :func:`check_reproducible` compared: the tensors of run 1, in order, and every
    difference found in the later runs (empty when all runs were bit-identical)."""

    target: str
    applied: str  # the apply_all() call each run made first
    runs: int
    names: Tuple[str, ...]
    differences: Tuple[Difference, ...]

    @property
    def identical(self) -> bool:
        return not self.differences

    def differing(self) -> Tuple[str, ...]:
        """Names of the tensors that differ in some run, in run 1's order (then missing ones)."""
        found = {d.name for d in self.differences}
        return tuple(n for n in self.names if n in found) + tuple(sorted(found - set(self.names)))

    def summary(self) -> str:
        if self.identical:
            return f"{self.target}: {self.runs} runs with {self.applied} bit-identical ({len(self.names)} tensors)"
        first = self.differences[0]
        differing = self.differing()
        same = [n for n in self.names if n not in differing]
        return (f"{self.target} is not reproducible in {self.runs} runs with {self.applied}: {first.message}\n"
                f"differing: {', '.join(differing)}; identical: {', '.join(same) or 'none'}")


def check_reproducible(target: Target, runs: int = 2, *, seed: int = 0,
                       deterministic: bool = True, outputs: Sequence[str] = (), args: Sequence[str] = (),
                       timeout: float = 600.0, progress: Optional[Progress] = None) -> Reproduction:
    """Run ``target`` ``runs`` times, each in a fresh interpreter that first calls
    ``tf_patches.apply_all(deterministic=deterministic, seed=seed)``, and compare the results
    bit for bit with run 1's.

    ``target`` is a module-level function (or ``"module:function"``), called without arguments;
    its return value is compared: arrays, tensors, variables, Keras models (their weights),
    numbers, and lists, tuples and dicts of those. Or it is a script path, run as ``__main__``
    with ``args``; compared are the files named in ``outputs`` once it ends (``.npy``, ``.npz``,
    ``.h5``/``.weights.h5``/``.keras`` weights by array, any other file byte by byte), else its
    module-level arrays, tensors, variables and Keras models.

    Runs go side by side (one per CPU at most), except with ``outputs`` (each run would overwrite
    the others' files). Each run sees this process's ``sys.path``, working directory and
    environment (``TF_PATCHES_*`` variables removed: the keywords decide). ``progress(done, runs)``
    is called as runs end.
    """
    spec = _target_spec(target, outputs, args)
    runs = _count("runs", runs, minimum=2)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be True or False, got {deterministic!r}")
    from ..core.seeds import MAX_SEED

    if _count("seed", seed, minimum=0) > MAX_SEED:
        raise ValueError(f"seed must be <= {MAX_SEED} (NumPy's range), got {seed}")
    spec["apply"] = {"deterministic": True, "seed": seed} if deterministic else {"deterministic": False}
    with tempfile.TemporaryDirectory(prefix="tf-patches-repro-") as folder:
        paths = [os.path.join(folder, f"run{i + 1}.npz") for i in range(runs)]
        finished = []

        def one(index: int) -> None:
            _run_child(spec, paths[index], index + 1, timeout)
            finished.append(index)
            if progress is not None:
                progress(len(finished), runs)

        with ThreadPoolExecutor(1 if spec["outputs"] else min(runs, os.cpu_count() or 1)) as pool:
            for future in [pool.submit(one, i) for i in range(runs)]:
                future.result()
        results = [_load(path) for path in paths]
    differences = tuple(difference for run, other in enumerate(results[1:], start=2)
                        for difference in _compare(results[0], other, run))
    applied = "apply_all(" + ", ".join(f"{k}={v!r}" for k, v in spec["apply"].items()) + ")"
    return Reproduction(target=spec["label"], applied=applied, runs=runs, names=tuple(results[0]),
                        differences=differences)


def assert_reproducible(target: Target, runs: int = 2, **options: Any) -> Reproduction:
    """:func:`check_reproducible`, raising ``AssertionError`` that names the first differing
    tensor, its index and both values when runs differ."""
    result = check_reproducible(target, runs, **options)
    if not result.identical:
        raise AssertionError(result.summary())
    return result


def _target_spec(target: Any, outputs: Sequence[str], args: Sequence[str]) -> Dict[str, Any]:
    """What the child needs to find the target, checked here so mistakes fail before any run."""
    for name, value in (("outputs", outputs), ("args", args)):
        if isinstance(value, (str, bytes)) or not all(isinstance(item, (str, os.PathLike)) for item in value):
            raise TypeError(f"{name} must be a list of strings, got {value!r}")
    outputs = list(dict.fromkeys(os.fspath(p) for p in outputs))  # each file once: names must be unique
    args = [os.fspath(a) for a in args]
    if callable(target) and not isinstance(target, (str, os.PathLike)):
        module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", "")
        if not module or module == "__main__" or "<" in qualname:
            raise TypeError(f"{target!r} cannot be imported by a fresh process: use a function defined at "
                            "module level in an importable module, or a script path")
        spec = {"kind": "function", "module": module, "qualname": qualname, "label": f"{module}:{qualname}"}
    elif isinstance(target, (str, os.PathLike)):
        text = os.fspath(target)
        if text.endswith(".py") or os.path.isfile(text):
            if not os.path.isfile(text):
                raise ValueError(f"script {text!r} not found")
            spec = {"kind": "script", "path": os.path.abspath(text), "label": text}
        elif _MODULE_FUNCTION.match(text):
            module, qualname = text.split(":")
            spec = {"kind": "function", "module": module, "qualname": qualname, "label": text}
        else:
            raise ValueError(f"target {text!r} is neither a script path (.py) nor 'module:function'")
    else:
        raise TypeError(f"target must be a script path, 'module:function' or a function, got {target!r}")
    if spec["kind"] == "function" and (outputs or args):
        raise ValueError("outputs and args are for script targets; a function's return value is compared")
    return {**spec, "outputs": outputs, "args": args}


def child_environment() -> Dict[str, str]:
    """The environment for a fresh interpreter that must import what this one imports: this
    process's ``sys.path`` on ``PYTHONPATH`` (pytest adds test folders there), ``TF_PATCHES_*``
    variables removed so that only explicit settings decide."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_PATCHES_")}
    env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p or os.curdir) for p in sys.path)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def _run_child(spec: Dict[str, Any], out: str, run: int, timeout: float) -> None:
    command = [sys.executable, "-m", "tf_patches.testing.reproduce", json.dumps(spec), out]
    try:
        proc = subprocess.run(command, env=child_environment(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"run {run} of {spec['label']} did not finish in {timeout:g} s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"run {run} of {spec['label']} failed (exit status {proc.returncode}):\n"
                           f"{proc.stderr[-4000:]}")


def _load(path: str) -> Dict[str, Any]:
    import numpy as np

    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def _compare(first: Mapping[str, Any], other: Mapping[str, Any], run: int) -> List[Difference]:
    import numpy as np

    found = []
    for name in [*first, *(n for n in other if n not in first)]:
        if name not in other or name not in first:
            where = "run 1" if name not in first else f"run {run}"
            found.append(Difference(run, name, f"{name!r} is missing from {where}"))
            continue
        a, b = first[name], other[name]
        if a.dtype != b.dtype or a.shape != b.shape:
            found.append(Difference(run, name, f"{name!r} is {a.dtype}{list(a.shape)} in run 1 "
                                               f"but {b.dtype}{list(b.shape)} in run {run}"))
            continue
        # Bytes, not values: NaN == NaN is False and 0.0 == -0.0 is True, but neither is bit-identical.
        mask = (a.reshape(a.shape + (1,)).view(np.uint8) != b.reshape(b.shape + (1,)).view(np.uint8)).any(axis=-1)
        count = int(mask.sum())
        if count:
            index = tuple(int(i) for i in np.argwhere(mask)[0])
            found.append(Difference(run, name, f"run {run} differs from run 1 in {name!r} "
                                               f"({a.dtype}{list(a.shape)}) at index {index}: {_value(a, index)} "
                                               f"in run 1, {_value(b, index)} in run {run}; {count:,} of "
                                               f"{a.size:,} elements differ"))
    return found


def _value(array: Any, index: Tuple[int, ...]) -> str:
    import numpy as np

    value = array[index]
    text = repr(value.item())
    if array.dtype.kind == "f":  # two floats can print alike and still differ in their last bits
        text += f" (bits 0x{np.array(value, dtype=array.dtype.newbyteorder('>')).tobytes().hex()})"
    return text


def _count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
