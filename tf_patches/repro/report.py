"""What ``tf-patches repro`` says: one verdict, the first difference, and why: the traps the runs
sprang (earliest first, each with the user's line and its fix, read through the registry from
each trap module's ``TRAP``), the fingerprint fields that differ (between runs, or with
``--against`` between machines), the seeds each process used and where they came from, and what
it could not check. As text (stderr) and as one JSON document (``SCHEMA``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from . import datafiles
from .masking import Masker, final_lines, first_difference, quoted
from .runner import Run

SCHEMA = "tf-patches-repro/1"
REPEATABLE, NOT_REPEATABLE, NOT_CHECKED = "repeatable", "not repeatable", "not checked"
# The cause repro names itself where a TF process ran with no seed at all (no trap springs for it:
# every run of an unseeded program differs, as it should). Its fix is op_determinism's.
UNSEEDED = "op_determinism"
UNSEEDED_FLAGS = ("--deterministic", "--seed", "0")
_MAX_SEED_ROWS = 8  # processes per run listed with their seeds


@dataclass
class Cause:
    """A trap sprung in the runs (or the missing seed), as the report names it."""

    name: str  # the registry entry's name
    where: str  # the user's "path:line", or ""
    explanation: str
    fix: str
    run_flags: Tuple[str, ...] = ()
    apply_kwargs: str = ""
    too_repeatable: bool = False
    message: str = ""
    runs: List[int] = field(default_factory=list)
    time: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "where": self.where, "explanation": self.explanation, "fix": self.fix,
                "run_flags": list(self.run_flags), "apply_kwargs": self.apply_kwargs,
                "too_repeatable": self.too_repeatable, "message": self.message, "runs": list(self.runs)}


@dataclass
class ReproReport:
    command: List[str]
    runs: List[Run]
    compared: List[str]  # "stdout", "stderr" and the --compare paths
    verdict: str = NOT_CHECKED
    summary: str = ""
    first_difference: Optional[Dict[str, Any]] = None
    causes: List[Cause] = field(default_factory=list)
    fingerprint: Dict[str, Any] = field(default_factory=dict)
    seeds: List[Dict[str, Any]] = field(default_factory=list)
    not_checked: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    verification: Optional[Dict[str, Any]] = None
    patch_flags: List[str] = field(default_factory=list)  # the `tf-patches run` flags the runs had

    @property
    def repeatable(self) -> bool:
        return self.verdict == REPEATABLE

    def fixes(self) -> Tuple[List[str], List[str]]:
        """The causes with a fix tf-patches can apply, and the union of their run flags, in order,
        each option once (what ``--verify`` applies)."""
        from ..diagnosis.verify import union_flags  # diagnose --verify joins its fixes' flags alike

        fixing = [cause for cause in self.causes if cause.run_flags]
        names = list(dict.fromkeys(cause.name for cause in fixing))
        return names, union_flags(cause.run_flags for cause in fixing)

    def to_dict(self) -> Dict[str, Any]:
        return {"schema": SCHEMA, "verdict": self.verdict, "summary": self.summary, "command": self.command,
                "compared": self.compared, "runs": [run.to_dict() for run in self.runs],
                "first_difference": self.first_difference, "traps": [cause.to_dict() for cause in self.causes],
                "fingerprint": self.fingerprint, "seeds": self.seeds, "not_checked": self.not_checked,
                "notes": self.notes, "verification": self.verification}

    def __str__(self) -> str:
        lines = [f"{self.verdict}: {self.summary}" if self.summary else self.verdict]
        statuses = ", ".join(run.failure() for run in self.runs)
        times = ", ".join(f"{run.seconds:.1f} s" for run in self.runs)
        lines.append(f"  {len(self.runs)} run{'s' if len(self.runs) != 1 else ''} of {_joined(self.command)}"
                     f"{' with ' + ' '.join(self.patch_flags) if self.patch_flags else ''}: {statuses}; {times}")
        failed = next((run for run in self.runs if run.failed), None)
        if failed is not None and failed.stderr.strip():
            tail = failed.stderr.strip().splitlines()[-5:]
            lines.append(f"  run {failed.number}'s last lines of stderr:")
            lines += [f"    {line[:200]}" for line in tail]
        if self.causes:
            warn_only = self.repeatable
            lines.append("warning: the runs are identical, but:" if warn_only else "why (earliest first):")
            named = set()
            for number, cause in enumerate(self.causes, start=1):
                where = f" at {cause.where}" if cause.where else ""
                seen = f" (run {', '.join(map(str, cause.runs))})" if cause.runs and len(cause.runs) < len(self.runs) else ""
                if cause.name in named:  # the same trap at another line: said once above
                    lines.append(f"  {number}. {cause.name}{where}{seen}: the same")
                    continue
                named.add(cause.name)
                lines.append(f"  {number}. {cause.name}{where}{seen}: {cause.explanation}")
                fix = cause.fix
                if cause.run_flags:
                    fix += f" [tf-patches run {' '.join(cause.run_flags)}" + \
                        (f"; apply_all({cause.apply_kwargs})]" if cause.apply_kwargs else "]")
                lines.append(f"     fix: {fix}")
        elif not self.repeatable and self.verdict == NOT_REPEATABLE:
            lines.append("why: no known trap sprang in the runs (see the fingerprint and seeds below)")
        lines += _fingerprint_lines(self.fingerprint, len(self.runs))
        if self.seeds:
            lines.append("seeds:")
            for row in self.seeds:
                lines.append(f"  run {row['run']}, pid {row['pid']} ({row['command']}): {row['source']}")
        for note in self.notes:
            lines.append(f"note: {note}")
        if self.not_checked:
            lines.append("not checked: " + "; ".join(self.not_checked))
        if self.verification:
            lines.append(verification_line(self.verification))
        return "\n".join(lines)


def verification_line(verification: Mapping[str, Any]) -> str:
    head = f"--verify: {_joined(verification.get('command') or [])}: "
    if verification.get("verdict") is None:
        return head + (verification.get("summary") or "not run")
    text = head + f"{verification['verdict']}: {verification.get('summary', '')}"
    if verification.get("traps_left"):
        text += f" (still sprang: {', '.join(verification['traps_left'])})"
    return text


# -- building it ------------------------------------------------------------------------------
def build(command: Sequence[str], runs: List[Run], compare: Sequence[str], masker: Masker,
          compare_stderr: bool = False, against: Optional[Mapping[str, Any]] = None,
          against_label: str = "") -> ReproReport:
    report = ReproReport(list(command), runs, ["stdout", *(["stderr"] if compare_stderr else []), *compare])
    masker = Masker(masker.ignore, tuple(pid for run in runs for pid in run.pids()) + masker.pids)
    _verdict(report, runs, compare, masker, compare_stderr)
    report.causes = causes(runs, report.verdict)
    report.fingerprint = _fingerprints(runs, against, against_label)
    report.seeds = _seeds(runs)
    report.not_checked = _not_checked(runs, report.fingerprint, against)
    for run in runs:
        report.notes.extend(run.notes)
    return report


def _verdict(report: ReproReport, runs: List[Run], compare: Sequence[str], masker: Masker,
             compare_stderr: bool) -> None:
    first = runs[0]
    if first.failed:
        report.verdict, report.summary = NOT_CHECKED, f"run 1 failed ({first.failure()}): nothing to compare"
        return
    streams = [("stdout", lambda run: run.stdout)] + ([("stderr", lambda run: run.stderr)] if compare_stderr else [])
    lines = {name: final_lines(read(first)) for name, read in streams}
    for run in runs[1:]:
        if run.status != first.status:
            report.verdict = NOT_REPEATABLE
            report.summary = f"run 1 ended with {first.failure()}, run {run.number} with {run.failure()}"
            report.first_difference = {"stream": "exit status", "run": run.number, "line": None,
                                       "values": [first.status, run.status]}
            return
        for name, read in streams:
            found = first_difference(lines[name], final_lines(read(run)), masker)
            if found is not None:
                report.verdict = NOT_REPEATABLE
                which = f" of run {run.number}" if run.number != 2 else ""
                report.summary = (f"first difference at {name} line {found.line}{which} "
                                  f"({quoted(found.first)} vs {quoted(found.other)})")
                report.first_difference = {"stream": name, "run": run.number, "line": found.line,
                                           "values": [found.first, found.other]}
                return
        for path in compare:
            file_notes: List[str] = []
            found_file = datafiles.compare(path, first.files.get(path), run.files.get(path), run.number, file_notes)
            for note in file_notes:
                if note not in report.notes:
                    report.notes.append(note)
            if found_file is not None:
                report.verdict = NOT_REPEATABLE
                at = f" array {found_file.array!r}" if found_file.array else ""
                at += f" at index {found_file.index}" if found_file.index is not None else ""
                report.summary = f"first difference in {path}{at} ({found_file.first} vs {found_file.other})"
                report.first_difference = {**found_file.to_dict(), "line": None}
                return
    report.verdict = REPEATABLE
    counted = [f"stdout {_count(len(lines['stdout']), 'line')}"]
    if compare_stderr:
        counted.append(f"stderr {_count(len(lines['stderr']), 'line')}")
    if compare:
        counted.append(_count(len(compare), "file"))
    report.summary = f"{len(runs)} runs identical ({', '.join(counted)})"


def causes(runs: Sequence[Run], verdict: str) -> List[Cause]:
    """The traps the runs sprang, earliest first, one per trap and line; where runs differ and a
    TF process had no seed at all, that first. A repeatable run keeps only the traps that make runs
    too repeatable (and says so)."""
    declared = _declared_traps()
    found: Dict[Tuple[str, str], Cause] = {}
    for run in runs:
        for event in run.events:
            name, where = str(event.get("trap")), str(event.get("where") or "")
            cause = found.get((name, where))
            if cause is None:
                trap = declared.get(name)
                cause = found[(name, where)] = Cause(
                    name, where, explanation=getattr(trap, "explanation", "") or str(event.get("message", "")),
                    fix=getattr(trap, "fix", "") or "see the warning's message",
                    run_flags=tuple(getattr(trap, "run_flags", ()) or ()),
                    apply_kwargs=getattr(trap, "apply_kwargs", "") or "",
                    too_repeatable=bool(getattr(trap, "too_repeatable", False)),
                    message=str(event.get("message", "")), time=float(event.get("time") or 0))
            if run.number not in cause.runs:
                cause.runs.append(run.number)
    ordered = sorted(found.values(), key=lambda cause: cause.time)
    if verdict == REPEATABLE:
        return [cause for cause in ordered if cause.too_repeatable]
    if verdict == NOT_REPEATABLE:
        ordered.sort(key=lambda cause: cause.too_repeatable)  # stable: earliest first among each
        unseeded = _unseeded(runs, declared.get(UNSEEDED))
        if unseeded is not None:
            ordered.insert(0, unseeded)
    return ordered


def _declared_traps() -> Dict[str, Any]:
    try:
        from ..core.registry import specs

        return {spec.name: spec.trap for spec in specs() if getattr(spec, "trap", None) is not None}
    except Exception:  # a registry that cannot load: the events' own messages still say it
        return {}


def _unseeded(runs: Sequence[Run], declared: Any) -> Optional[Cause]:
    """The missing seed, where some TF process of the runs had no global seed at all."""
    seen = [run.number for run in runs
            if any(data.get("tensorflow") and (data.get("seeds") or {}).get("tf_global_seed", 0) is None
                   for data in run.processes)]
    if not seen:
        return None
    return Cause(UNSEEDED, "", runs=seen,
                 explanation=("no seed was set (TensorFlow's global seed is unset): TF's random ops and "
                              "initializers, Python's random and NumPy draw new numbers on every run"),
                 fix=("seed the run: tf-patches run --deterministic (seed 0, or --seed N), or in code "
                      "tf_patches.apply_all(deterministic=True, seed=N) / keras.utils.set_random_seed(N) "
                      "with tf.config.experimental.enable_op_determinism()"),
                 run_flags=tuple(getattr(declared, "run_flags", ()) or UNSEEDED_FLAGS),
                 apply_kwargs=getattr(declared, "apply_kwargs", "") or "deterministic=True, seed=0")


def _fingerprints(runs: Sequence[Run], against: Optional[Mapping[str, Any]], label: str) -> Dict[str, Any]:
    """Run 1's fingerprint (its first TF process's), and the fields that differ: between runs, and
    from ``against``'s (another machine's report)."""
    prints = [(run.number, _first_fingerprint(run)) for run in runs]
    values = next((value for _, value in prints if value), None)
    result: Dict[str, Any] = {"values": values, "differences": [], "against": None}
    if not values:
        return result
    from ..core.fingerprint import differences

    for number, value in prints[1:]:
        if value:
            for key, left, right in differences(values, value):
                result["differences"].append({"field": key, "run": number, "values": [left, right]})
    if against is not None:
        theirs = _their_fingerprint(against)
        result["against"] = {"file": label, "differences": [
            {"field": key, "values": [left, right]} for key, left, right in differences(values, theirs)]
            if theirs else None}
    return result


def _first_fingerprint(run: Run) -> Optional[Dict[str, Any]]:
    for data in run.processes:
        value = data.get("fingerprint")
        if isinstance(value, dict) and "unreadable" not in value:
            return value
    return None


def _their_fingerprint(data: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """The fingerprint in another machine's ``repro --json`` or ``tf-patches report --json``."""
    value = data.get("fingerprint")
    if isinstance(value, dict) and isinstance(value.get("values"), dict):
        return value["values"]  # repro's
    if isinstance(value, dict) and value:
        return value  # report()'s
    return dict(data) if "tensorflow" in data else None


def _seeds(runs: Sequence[Run]) -> List[Dict[str, Any]]:
    rows = []
    for run in runs:
        for data in run.processes[:_MAX_SEED_ROWS]:
            seeds = data.get("seeds") or {}
            rows.append({"run": run.number, "pid": data.get("pid"), "command": _short(data.get("argv") or []),
                         "tf_global_seed": seeds.get("tf_global_seed"), "source": seed_source(data),
                         "variables": seeds.get("variables") or {}})
    return rows


def seed_source(data: Mapping[str, Any]) -> str:
    """Which seed a process used and where it came from, in words."""
    seeds = data.get("seeds") or {}
    if not data.get("tensorflow"):
        return "TensorFlow not imported (Python's and NumPy's seeds are not recorded)"
    seed = seeds.get("tf_global_seed")
    row = seeds.get("op_determinism") or {}
    if row.get("status") == "applied" and "seed" in str(row.get("reason", "")):
        return f"TF global seed {seed}, from tf-patches: {row.get('reason')}"
    if seed is None:
        return "no TF global seed: TF's random ops draw from the operating system's entropy"
    return f"TF global seed {seed}, set by the program (tf.random.set_seed or keras.utils.set_random_seed)"


def _not_checked(runs: Sequence[Run], fingerprint: Mapping[str, Any], against: Any) -> List[str]:
    said = []
    values = fingerprint.get("values") or {}
    if not any(data.get("tensorflow") for run in runs for data in run.processes):
        said.append("no process of the runs imported TensorFlow (or none reached its exit): no trap "
                    "detector, seed or fingerprint was recorded")
    elif not values.get("gpus"):
        said.append("a GPU (none here: GPU-only non-determinism, atomics in cuDNN and cuBLAS kernels, "
                    "was not exercised)")
    if against is None:
        said.append("other machines (this one only: pass --against REPORT.json from another)")
    return said


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'s' if number != 1 else ''}"


def _short(argv: Sequence[str], limit: int = 60) -> str:
    text = _joined(argv)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _joined(command: Sequence[str]) -> str:
    import shlex

    return shlex.join(str(part) for part in command)


def _fingerprint_lines(fingerprint: Mapping[str, Any], runs: int) -> List[str]:
    values = fingerprint.get("values")
    if not values:
        return []
    brief = ", ".join(f"{key} {_show(values.get(key))}" for key in
                      ("tensorflow", "keras", "onednn", "intra_op_threads", "op_determinism") if key in values)
    lines = []
    differences = fingerprint.get("differences") or []
    if differences:
        lines.append("fingerprint fields that differ between runs:")
        lines += [f"  {d['field']}: {_show(d['values'][0])} in run 1, {_show(d['values'][1])} in run {d['run']}"
                  for d in differences]
    else:
        lines.append(f"fingerprint: the same in the {runs} runs ({brief})")
    against = fingerprint.get("against")
    if against:
        found = against.get("differences")
        if found is None:
            lines.append(f"  --against {against.get('file')}: holds no fingerprint")
        elif found:
            lines.append(f"fingerprint fields that differ from {against.get('file')}:")
            lines += [f"  {d['field']}: {_show(d['values'][0])} here, {_show(d['values'][1])} there" for d in found]
        else:
            lines.append(f"  the same as in {against.get('file')}")
    return lines


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)
