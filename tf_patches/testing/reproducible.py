"""``check_reproducible`` / ``assert_reproducible`` (public from :mod:`tf_patches.testing`): a
script or an importable function run in fresh interpreters with ``tf_patches.apply_all(
deterministic=True, seed=...)`` applied first, each run in its command session
(:func:`tf_patches.session.command.run`), and what they produce compared bit for bit
(:mod:`tf_patches.session.arrays`). Imports neither TensorFlow nor NumPy until a check runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ..core.memory import Progress, checked_count

TYPE_CHECKING = False  # typing.TYPE_CHECKING, which type checkers read alike
if TYPE_CHECKING:
    from ..core.settings import Settings

_MODULE_FUNCTION = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")

Target = Union[str, "os.PathLike[str]", Callable[[], Any]]  # a script, "module:function" or a function


@dataclass(frozen=True)
class Difference:
    """How run ``run`` differs from run 1 in one tensor (runs are numbered from 1)."""

    run: int
    name: str
    message: str


@dataclass(frozen=True)
class Reproduction:
    """What :func:`check_reproducible` compared: the tensors of run 1, in order, and every
    difference found in the later runs (empty when all runs were bit-identical), with each
    run's fingerprint (``tf_patches.fingerprint()`` once its target ran; ``{}`` if unread)."""

    target: str
    applied: str  # the apply_all() call each run made first
    runs: int
    names: Tuple[str, ...]
    differences: Tuple[Difference, ...]
    fingerprints: Tuple[Dict[str, Any], ...] = ()

    def fingerprint_differences(self) -> List[Tuple[int, str, Any, Any]]:
        """``(run, field, value in run 1, value in that run)`` for each fingerprint field in
        which a later run differs from run 1 (runs numbered from 1)."""
        from ..core.fingerprint import differences

        first = self.fingerprints[0] if self.fingerprints else {}
        return [(run, *found) for run, other in enumerate(self.fingerprints[1:], start=2)
                if first and other for found in differences(first, other)]

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
        return (f"{self.target} is not reproducible in {self.runs} runs with {self.applied}: "
                f"{self._fingerprint_text()}{first.message}\n"
                f"differing: {', '.join(differing)}; identical: {', '.join(same) or 'none'}")

    def _fingerprint_text(self) -> str:
        """The runs' fingerprint differences first (the likely why), as a sentence; "" if none."""
        from ..core.fingerprint import differences_text

        found = self.fingerprint_differences()
        texts = [differences_text([f[1:] for f in found if f[0] == run], "run 1", f"run {run}")
                 for run in sorted({f[0] for f in found})]
        return "".join(f"{text}.\n" for text in texts)


def check_reproducible(target: Target, runs: int = 2, *, seed: int = 0,
                       deterministic: bool = True, outputs: Sequence[str] = (), args: Sequence[str] = (),
                       timeout: float = 600.0, progress: Optional[Progress] = None,
                       settings: Optional["Settings"] = None) -> Reproduction:
    """Run ``target`` ``runs`` times, each in a fresh interpreter that first calls
    ``tf_patches.apply_all(deterministic=deterministic, seed=seed)``, and compare the results
    bit for bit with run 1's. ``settings`` (a :class:`tf_patches.Settings`) adds other options
    for the runs; where it gives ``deterministic`` or ``seed``, its value wins (``hash_seed``
    sets the runs' PYTHONHASHSEED; ``malloc`` is refused: use ``tf-patches run``).

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
    runs = checked_count("runs", runs, minimum=2)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be True or False, got {deterministic!r}")
    from ..core.seeds import MAX_SEED

    if checked_count("seed", seed, minimum=0) > MAX_SEED:
        raise ValueError(f"seed must be <= {MAX_SEED} (NumPy's range), got {seed}")
    from ..core.settings import Settings

    if settings is not None and not isinstance(settings, Settings):
        raise TypeError(f"settings must be a tf_patches.Settings, got {settings!r}")
    keywords = Settings(deterministic=True, seed=seed) if deterministic else Settings(deterministic=False)
    chosen = (settings or Settings()).merged(keywords)
    if chosen.malloc is not None:
        raise ValueError("settings: malloc preloads an allocator where a command starts: use tf-patches run")
    spec["environ"] = chosen.to_environ()  # the runs' variables: what apply_all reads there
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
        fingerprints = tuple(_load_fingerprint(path) for path in paths)
    differences = tuple(difference for run, other in enumerate(results[1:], start=2)
                        for difference in _compare(results[0], other, run))
    applied = f"apply_all({chosen.to_code()})"
    return Reproduction(target=spec["label"], applied=applied, runs=runs, names=tuple(results[0]),
                        differences=differences, fingerprints=fingerprints)


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
    """One run in a fresh interpreter, in its command session (:func:`tf_patches.session.command.run`,
    as repro's and diagnose's commands): past ``timeout``, and when it ends, everything it started
    goes with it (its tree, whatever carries its mark or writes to its stderr), not only the
    child, so a helper it left cannot outlive the check. It leads a session of its own, so a
    terminal's Ctrl-C reaches the test runner, which ends it."""
    from ..session import command as session

    command = [sys.executable, "-m", "tf_patches.testing.reproduce", json.dumps(spec), out]
    with tempfile.TemporaryFile() as stderr:  # a file, not a pipe: a chatty run cannot block on it
        ended = session.run("tf_patches.testing.check_reproducible", command,
                            {**child_environment(), **spec["environ"]}, stdout=subprocess.DEVNULL,
                            stderr=stderr, timeout=timeout, new_session=True)
        stderr.seek(0)
        text = stderr.read().decode("utf-8", "replace")
    if ended.returncode is None:
        raise RuntimeError(f"run {run} of {spec['label']} could not start: {text[-4000:]}")
    if ended.timed_out:
        raise RuntimeError(f"run {run} of {spec['label']} did not finish in {timeout:g} s")
    if ended.returncode != 0:
        raise RuntimeError(f"run {run} of {spec['label']} failed (exit status {ended.returncode}):\n"
                           f"{text[-4000:]}")


def _load(path: str) -> Dict[str, Any]:
    import numpy as np

    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def _load_fingerprint(path: str) -> Dict[str, Any]:
    from .reproduce import fingerprint_path

    try:
        with open(fingerprint_path(path), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _compare(first: Mapping[str, Any], other: Mapping[str, Any], run: int) -> List[Difference]:
    from ..session.arrays import first_bit_difference, value  # repro compares files the same way

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
        differs = first_bit_difference(a, b)
        if differs is not None:
            index, count = differs
            found.append(Difference(run, name, f"run {run} differs from run 1 in {name!r} "
                                               f"({a.dtype}{list(a.shape)}) at index {index}: {value(a, index)} "
                                               f"in run 1, {value(b, index)} in run {run}; {count:,} of "
                                               f"{a.size:,} elements differ"))
    return found
