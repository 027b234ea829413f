"""Suspects: the causes the runs' own evidence points at, before any experiment. Each comes from
what ran, never from the program's text: the recorders' unseeded draws, seeds and tf.data choices
(:mod:`.recorders`, in each process's evidence), the registry traps that sprang, the values that
differ (the clock's), what an earlier run left in the working folder, and the fingerprints.
:mod:`.experiments` then turns each suspect's knob to confirm it or rule it out.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .model import Cause, TrapSeen
from .runner import Run
from ..core.registry import by_name
from .vocabulary import CAUSES, SEED_FIX, Fix, fix_text, settings_of

LIBRARIES_OF_THE_MODEL = ("keras", "tf_keras", "tensorflow", "tensorflow_core")  # draw for layers and datasets
_STRENGTH = {  # suspects' order before experiments: what the differing values show first
    "clock_in_output": 0, "state_left_by_run": 1, "seed_varies": 2, "keras_seed": 3, "parallel_random_map": 3,
    "seeded_too_late": 4, "tfdata_nondeterministic": 5, "list_files_shuffle": 5, "numpy_unseeded": 6,
    "python_random_unseeded": 6, "tf_seed_unset": 7, "environment": 8,
}
_CLOCK_MARGIN_S = 3600.0
_NOT_ENVIRONMENT = ("tf_global_seed",)  # a seed that differs is seed_varies (the recorders say where)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
_BITS = re.compile(r"\s*\(bits 0x[0-9a-fA-F]+\)")
# What seeds a global generator: random.seed, np.random.seed, tf.random.set_seed (and v1's);
# keras.utils.set_random_seed calls all three.
GLOBAL_SEEDERS = ("seed", "set_seed", "set_random_seed")
_PYTHON_INSTANCES = ("Random", "Random.seed")  # a random.Random() of the program's own
_TF_GENERATORS = ("Generator.from_non_deterministic_state", "get_global_generator")
_SEED_SOURCES = {"tf_op": "tf", "numpy_global": "numpy", "python_random": "python_random"}
_WORDS = {"tf_op": "a TF op", "numpy_global": "NumPy's global RandomState",
          "numpy_generator": "an unseeded NumPy generator (default_rng(), RandomState(), PCG64()...)", "python_random": "Python's random"}


class Collector:
    """Suspects by name, merged: the first line, every run, and each piece of evidence once."""

    def __init__(self, cwd: Optional[str]) -> None:
        self.cwd = cwd or os.getcwd()
        self.found: Dict[str, Cause] = {}
        self.weak: set = set()  # names seen only as a weak sign: ordered after every other suspect

    def add(self, name: str, where: str, evidence: str, run: int, time: float = 0.0,
            fix_settings: Optional[Fix] = None, fix: Optional[str] = None, knob: Optional[str] = None) -> None:
        where = relative(where, self.cwd)
        kind = CAUSES[name]
        cause = self.found.get(name)
        if cause is None:
            cause = self.found[name] = Cause(
                name, where, fix=fix if fix is not None else fix_text(name, where),
                settings=settings_of(kind.fix_settings if fix_settings is None else fix_settings),
                knob=kind.knob if knob is None else knob, time=time or float("inf"))
        elif time and time < cause.time and where:
            cause.where, cause.time = where, time  # the earliest line
            cause.fix = fix if fix is not None else fix_text(name, where)
        if evidence and evidence not in cause.evidence and len(cause.evidence) < 6:
            cause.evidence.append(evidence)
        if run not in cause.runs:
            cause.runs.append(run)

    def ordered(self) -> List[Cause]:
        return sorted(self.found.values(), key=lambda cause: (
            10 if cause.name in self.weak else _STRENGTH.get(cause.name, 9), cause.time))


def suspects(runs: Sequence[Run], traps: Sequence[TrapSeen], first_difference: Optional[Mapping[str, Any]],
             left_behind: Sequence[str], fingerprint_differences: Sequence[Mapping[str, Any]],
             cwd: Optional[str] = None) -> List[Cause]:
    """Every cause the evidence points at, strongest first (none confirmed yet)."""
    found = Collector(cwd)
    _clock(found, runs, first_difference)
    _state(found, runs, left_behind)
    trapped_lines = _traps(found, traps)
    for run in runs:
        for process in run.processes:
            randomness = process.get("randomness")
            if isinstance(randomness, dict):
                _randomness(found, run.number, randomness, trapped_lines, bool(process.get("tensorflow")))
    _seed_values(found, runs)
    for difference in fingerprint_differences:
        if difference.get("field") in _NOT_ENVIRONMENT:
            continue
        found.add("environment", "", f"{difference['field']}: {_show(difference['values'][0])} in run 1, "
                                     f"{_show(difference['values'][1])} in run {difference['run']}",
                  difference.get("run", 2))
    if not any(isinstance(process.get("randomness"), dict) for run in runs for process in run.processes):
        _global_seed_only(found, runs)
    return found.ordered()


# -- the differing values -----------------------------------------------------------------------
def _clock(found: Collector, runs: Sequence[Run], difference: Optional[Mapping[str, Any]]) -> None:
    """The values that differ are each run's own clock (epoch seconds, milliseconds, nanoseconds)."""
    if not difference or difference.get("stream") == "exit status":
        return
    values = difference.get("values") or []
    if len(values) != 2 or not all(isinstance(value, str) for value in values):
        return
    window = _window(runs)
    if window is None:
        return
    clocks = clock_values(values[0], values[1], window)
    if clocks:
        where = difference.get("stream", "")
        line = difference.get("line")
        found.add("clock_in_output", "", f"the values that differ ({clocks[0]} vs {clocks[1]}) in "
                  f"{where}{f' line {line}' if line else ''} are times during the runs", int(difference.get("run") or 2))


def clock_values(first: str, other: str, window: Tuple[float, float]) -> Optional[Tuple[str, str]]:
    """The first pair of differing numbers, if every pair that differs is a time inside
    ``window`` (as epoch seconds, milliseconds, microseconds or nanoseconds); else None."""
    first, other = _BITS.sub("", first), _BITS.sub("", other)  # a file's value: "1.5 (bits 0x3fc00000)"
    a, b = _NUMBER.findall(first), _NUMBER.findall(other)
    if len(a) != len(b) or _NUMBER.sub("#", first) != _NUMBER.sub("#", other):
        return None
    pairs = [(x, y) for x, y in zip(a, b) if x != y]
    if not pairs:
        return None
    for x, y in pairs:
        if not (_is_time(x, window) and _is_time(y, window)):
            return None
    return pairs[0]


def _is_time(text: str, window: Tuple[float, float]) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    low, high = window[0] - _CLOCK_MARGIN_S, window[1] + _CLOCK_MARGIN_S
    return any(low <= value / scale <= high for scale in (1.0, 1e3, 1e6, 1e9))


def _window(runs: Sequence[Run]) -> Optional[Tuple[float, float]]:
    starts = [getattr(run, "started_at", 0.0) for run in runs]
    ends = [getattr(run, "ended_at", 0.0) for run in runs]
    if not all(starts) or not all(ends) or not starts:
        return None
    return min(starts), max(ends)


# -- what a run left behind ---------------------------------------------------------------------
def _state(found: Collector, runs: Sequence[Run], left_behind: Sequence[str]) -> None:
    """A later run failed (or differed) where run 1 had not, and run 1 left files in the folder."""
    if not left_behind or len(runs) < 2:
        return
    first = runs[0]
    later = next((run for run in runs[1:] if run.status != first.status), None)
    shown = ", ".join(left_behind[:3]) + (f" and {len(left_behind) - 3} more" if len(left_behind) > 3 else "")
    if later is not None and first.status == 0:
        last = _last_line(later.stderr)
        found.add("state_left_by_run", "", f"run 1 left {shown} in the working folder, and run {later.number} "
                  f"then failed ({later.failure()}{': ' + last if last else ''})", later.number)
    else:
        found.add("state_left_by_run", "", f"run 1 left {shown} in the working folder, which later runs found there",
                  runs[1].number)
        found.weak.add("state_left_by_run")  # only a difference, no failure: a weak sign


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


# -- traps --------------------------------------------------------------------------------------
def _traps(found: Collector, traps: Sequence[TrapSeen]) -> set:
    """Run-varying traps are suspects with their own fix and flags; their lines, for the draws
    they explain already."""
    lines = set()
    for trap in traps:
        if trap.too_repeatable or trap.name not in CAUSES:
            continue  # makes runs alike: never why they differ
        where = relative(trap.where, found.cwd) if trap.where else "a line outside your code"
        runs = ", ".join(map(str, trap.runs))
        for run in trap.runs:
            found.add(trap.name, trap.where, f"the {trap.name} trap sprang at {where} "
                      f"(run{'s' if len(trap.runs) > 1 else ''} {runs})", run, trap.time,
                      fix_settings=_trap_fix(trap.name), fix=trap.fix,
                      knob=f"trap:{trap.name}" if trap.run_flags else "")
        lines.add(trap.where)
    return lines


def _trap_fix(name: str) -> Fix:
    """A registry trap's fix (its declared options), as settings."""
    spec = by_name(name)
    return tuple(spec.trap.settings.items()) if spec is not None and spec.trap is not None else ()


# -- the recorders' evidence --------------------------------------------------------------------
def _randomness(found: Collector, run: int, randomness: Mapping[str, Any], trapped_lines: set,
                tensorflow: bool) -> None:
    """The recorders' evidence of one process. tf-patches seeds at ``import tensorflow``: a draw
    in a process that never imports it, or before it does, is fixed by no flag of tf-patches'
    (a code change does)."""
    loaded = randomness.get("tensorflow_loaded_at")
    seeds = [seed for seed in randomness.get("seeds_set") or [] if isinstance(seed, dict)]
    tfdata = [entry for entry in randomness.get("tfdata") or [] if isinstance(entry, dict)]
    list_files_lines = {entry.get("where") for entry in tfdata if entry.get("kind") == "list_files_shuffle"}
    for entry in tfdata:
        name = "list_files_shuffle" if entry.get("kind") == "list_files_shuffle" else "tfdata_nondeterministic"
        found.add(name, str(entry.get("where") or ""), f"{entry.get('what') or name} at {_at(found, entry)}", run,
                  float(entry.get("time") or 0))
    seeded_any = bool(seeds)
    for draw in randomness.get("draws") or []:
        if not isinstance(draw, dict):
            continue
        where, source, via = str(draw.get("where") or ""), str(draw.get("source") or ""), str(draw.get("via") or "")
        function = str(draw.get("function") or "")
        time = float(draw.get("time") or 0)
        if where in trapped_lines or (source == "tf_op" and where in list_files_lines):
            continue  # a trap (or list_files) at that line says it better
        for_the_model = via in LIBRARIES_OF_THE_MODEL or source == "tf_op"
        # tf-patches' seeds come at `import tensorflow`: they fix only draws after it.
        seed_fix = None if tensorflow and (loaded is None or time >= float(loaded)) else ()
        # Keras draws a layer's seed from Python's random: any global seed set after it came too late.
        late = _seeded_after(seeds, "any" if for_the_model and source != "tf_op" else source, time)
        what = f"{_WORDS.get(source, source)}{' (through ' + via + ')' if via else ''} drew without a seed"
        if late is not None:
            knob = "global_seeds" if for_the_model and source != "tf_op" else _late_knob(source)
            found.add("seeded_too_late", where, f"{what} at {_at(found, draw)}, before the seed was set at "
                      f"{_at(found, late)}", run, time, knob=knob, fix_settings=seed_fix)
        elif for_the_model and function in _TF_GENERATORS:
            found.add("tf_seed_unset", where, f"a tf.random.Generator ({function}) made without a seed at "
                      f"{_at(found, draw)}", run, time, fix_settings=(),  # op determinism makes TF refuse it
                      fix=f"make it from a seed{_at_line(found, where)}: tf.random.Generator.from_seed(N) "
                          "(and tf.random.set_global_generator(...) for the global one)")
        elif for_the_model:
            found.add("tf_seed_unset", where, f"{what} at {_at(found, draw)}"
                      + ("" if seeded_any else "; no seed was set in that process"), run, time)
        elif source in ("numpy_global", "numpy_generator"):
            fixed_by = SEED_FIX if source == "numpy_global" and seed_fix is None else ()
            found.add("numpy_unseeded", where, f"{what} at {_at(found, draw)}", run, time, fix_settings=fixed_by)
        elif source == "python_random" and function in _PYTHON_INSTANCES:  # a Random() of its own
            found.add("python_random_unseeded", where, f"a random.Random() made without a seed at {_at(found, draw)}",
                      run, time, fix_settings=(),  # tf-patches seeds the module's generator, not instances
                      fix=f"give it a seed{_at_line(found, where)}: random.Random(SEED)")
        elif source == "python_random":
            found.add("python_random_unseeded", where, f"{what} at {_at(found, draw)}", run, time,
                      fix_settings=seed_fix)


def _seeded_after(seeds: Sequence[Mapping[str, Any]], source: str, time: float) -> Optional[Mapping[str, Any]]:
    """The first seed of ``source``'s kind (``"any"``: of any global generator) set after ``time``
    in the same process, if any."""
    kinds = set(_SEED_SOURCES.values()) if source == "any" else {_SEED_SOURCES.get(source)}
    for seed in seeds:
        if seed.get("function") not in GLOBAL_SEEDERS:
            continue  # Random(42), RandomState(7), Generator.from_seed(5): seed their own object only
        if seed.get("source") in kinds and float(seed.get("time") or 0) > time and seed.get("value") is not None:
            return seed
    return None


def _late_knob(source: str) -> str:
    return {"numpy_global": "seed_numpy", "python_random": "seed_python"}.get(source, "seed_tf")


def _seed_values(found: Collector, runs: Sequence[Run]) -> None:
    """A seed set at the same line with other values in other runs: ``seed_varies``."""
    values: Dict[Tuple[str, str], Dict[int, Any]] = {}
    for run in runs:
        for process in run.processes:
            randomness = process.get("randomness")
            if not isinstance(randomness, dict):
                continue
            for seed in randomness.get("seeds_set") or []:
                if isinstance(seed, dict) and seed.get("value") is not None:
                    key = (str(seed.get("source")), str(seed.get("where") or ""))
                    values.setdefault(key, {}).setdefault(run.number, seed.get("value"))
    for (source, where), by_run in values.items():
        distinct = list(dict.fromkeys(map(str, by_run.values())))
        if len(distinct) > 1:
            runs_seen = sorted(by_run)
            shown = ", ".join(f"{by_run[number]} in run {number}" for number in runs_seen[:3])
            found.add("seed_varies", where, f"the {source} seed set at {relative(where, found.cwd)} was {shown}",
                      runs_seen[1])


def _global_seed_only(found: Collector, runs: Sequence[Run]) -> None:
    """No recorder ran (an older tf-patches in the tree): a TF process without a global seed is all
    there is to go on."""
    for run in runs:
        for process in run.processes:
            seeds = process.get("seeds") or {}
            if process.get("tensorflow") and seeds.get("tf_global_seed", 0) is None:
                found.add("tf_seed_unset", "", "a TF process ran with no global seed (no draws were recorded)",
                          run.number)


# -- helpers ------------------------------------------------------------------------------------
def relative(where: str, cwd: str) -> str:
    """``path:line`` relative to ``cwd`` where the path is inside it."""
    path, colon, line = where.rpartition(":")
    if not colon or not path or not os.path.isabs(path):
        return where
    try:
        inside = os.path.commonpath([os.path.realpath(path), os.path.realpath(cwd)]) == os.path.realpath(cwd)
    except ValueError:
        return where
    return f"{os.path.relpath(path, cwd)}:{line}" if inside else where


def _at(found: Collector, entry: Mapping[str, Any]) -> str:
    where = str(entry.get("where") or "")
    return relative(where, found.cwd) if where else "a line outside your code"


def _at_line(found: Collector, where: str) -> str:
    return f" at {relative(where, found.cwd)}" if where else ""


def _show(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)

