"""What ``tf-patches repro`` says, put together and rendered: :func:`build` gathers one series of
runs into a :class:`~.model.ReproReport` (the comparison's verdict, the traps that sprang, the
fingerprints and seeds, and where the runs differ the suspects the evidence names), and
:func:`render` writes it as text for a person (stderr); :meth:`ReproReport.to_dict` is the JSON.
Experiments and ``--verify`` are :mod:`.command`'s (they run the command again)."""

from __future__ import annotations

import json
import shlex
from typing import Any, Dict, List, Mapping, Optional, Sequence

from . import causes as suspects_of
from .compare import compare
from .masking import Masker, quoted
from .model import NOT_CHECKED, NOT_REPEATABLE, REPEATABLE, Cause, ReproReport, TrapSeen, Verification
from .runner import Run

_MAX_SEED_ROWS = 8  # processes per run listed with their seeds
_MAX_MASKED_SHOWN = 5


# -- building it --------------------------------------------------------------------------------
def build(command: Sequence[str], runs: List[Run], compare_paths: Sequence[str], masker: Masker,
          compare_stderr: bool = False, against: Optional[Mapping[str, Any]] = None, against_label: str = "",
          left_behind: Sequence[str] = (), cwd: Optional[str] = None) -> ReproReport:
    report = ReproReport(list(command), runs, ["stdout", *(["stderr"] if compare_stderr else []), *compare_paths])
    comparison = compare(runs, compare_paths, masker, compare_stderr)
    report.verdict, report.summary = comparison.verdict, comparison.summary
    report.first_difference, report.masked = comparison.first_difference, comparison.masked
    report.traps = traps_of(runs)
    report.fingerprint = _fingerprints(runs, against, against_label)
    report.seeds = _seeds(runs)
    report.not_checked = comparison.not_checked + _not_checked(runs, report.fingerprint, against)
    report.notes.extend(comparison.notes)
    for run in runs:
        report.notes.extend(run.notes)
    if report.verdict == NOT_REPEATABLE:
        report.causes = suspects_of.suspects(runs, report.traps, report.first_difference, left_behind,
                                             report.fingerprint.get("differences") or [], cwd)
    report.warnings = _warnings(report)
    return report


def traps_of(runs: Sequence[Run]) -> List[TrapSeen]:
    """The traps the runs sprang, earliest first, one per trap and line."""
    declared = _declared_traps()
    found: Dict[tuple, TrapSeen] = {}
    for run in runs:
        for event in run.events:
            name, where = str(event.get("trap")), str(event.get("where") or "")
            trap = found.get((name, where))
            if trap is None:
                spec = declared.get(name)
                trap = found[(name, where)] = TrapSeen(
                    name, where, explanation=getattr(spec, "explanation", "") or str(event.get("message", "")),
                    fix=getattr(spec, "fix", "") or "see the warning's message",
                    run_flags=tuple(getattr(spec, "run_flags", ()) or ()),
                    apply_kwargs=getattr(spec, "apply_kwargs", "") or "",
                    too_repeatable=bool(getattr(spec, "too_repeatable", False)),
                    message=str(event.get("message", "")), time=float(event.get("time") or 0))
            if run.number not in trap.runs:
                trap.runs.append(run.number)
    return sorted(found.values(), key=lambda trap: trap.time)


def _declared_traps() -> Dict[str, Any]:
    try:
        from ..core.registry import specs

        return {spec.name: spec.trap for spec in specs() if getattr(spec, "trap", None) is not None}
    except Exception:  # a registry that cannot load: the events' own messages still say it
        return {}


def _warnings(report: ReproReport) -> List[str]:
    """What a "repeatable" verdict must not hide: traps that make runs too alike, and run-varying
    traps that sprang in every run while what was compared repeated."""
    if report.verdict != REPEATABLE:
        return []
    said = []
    for trap in report.traps:
        where = f" at {trap.where}" if trap.where else ""
        if trap.too_repeatable:
            said.append(f"{trap.name}{where}: {trap.explanation}; fix: {trap.fix}")
        elif len(trap.runs) == len(report.runs):
            said.append(f"{trap.name}{where} sprang in every run ({trap.explanation}), yet what was compared "
                        "repeats: what differs may be in what the program saves; compare it too "
                        "(--compare PATH, e.g. the saved weights)")
    return said


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
        theirs = their_fingerprint(against)
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


def their_fingerprint(data: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
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
            randomness = data.get("randomness") if isinstance(data.get("randomness"), dict) else {}
            rows.append({"run": run.number, "pid": data.get("pid"), "command": _short(data.get("argv") or []),
                         "tf_global_seed": seeds.get("tf_global_seed"), "source": seed_source(data),
                         "seeds_set": [{key: seed.get(key) for key in ("source", "value", "where")}
                                       for seed in (randomness.get("seeds_set") or [])[:5] if isinstance(seed, dict)],
                         "variables": seeds.get("variables") or {}})
    return rows


def seed_source(data: Mapping[str, Any]) -> str:
    """Which seed a process used and where it came from, in words."""
    seeds = data.get("seeds") or {}
    if not data.get("tensorflow"):
        return "TensorFlow not imported"
    seed = seeds.get("tf_global_seed")
    row = seeds.get("op_determinism") or {}
    if row.get("status") == "applied" and "seed" in str(row.get("reason", "")):
        return f"TF global seed {seed}, from tf-patches: {row.get('reason')}"
    if seed is None:
        return "no TF global seed at exit"
    return f"TF global seed {seed}, set by the program"


def _not_checked(runs: Sequence[Run], fingerprint: Mapping[str, Any], against: Any) -> List[str]:
    said = []
    values = fingerprint.get("values") or {}
    if not any(data.get("tensorflow") for run in runs for data in run.processes):
        said.append("no process of the runs imported TensorFlow (or none reached its exit): no TF seed, "
                    "trap or fingerprint was recorded")
    elif not values.get("gpus"):
        said.append("a GPU (none here: GPU-only non-determinism, atomics in cuDNN and cuBLAS kernels, "
                    "was not exercised)")
    if against is None:
        said.append("other machines (this one only: pass --against with another's --record FILE or report)")
    return said


# -- rendering it -------------------------------------------------------------------------------
def render(report: ReproReport) -> str:
    """The report as text, for a person."""
    lines = [f"{report.verdict}: {report.summary}" if report.summary else report.verdict]
    statuses = ", ".join(run.failure() for run in report.runs)
    times = ", ".join(f"{run.seconds:.1f} s" for run in report.runs)
    flags = f" with {' '.join(report.patch_flags)}" if report.patch_flags else ""
    lines.append(f"  {len(report.runs)} run{'s' if len(report.runs) != 1 else ''} of {joined(report.command)}"
                 f"{flags}: {statuses}; {times}")
    if report.stdin:
        lines.append(f"  stdin: {report.stdin}")
    failed = next((run for run in report.runs if run.failed), None)
    if failed is not None and failed.stderr.strip():
        lines.append(f"  run {failed.number}'s last lines of stderr:")
        lines += [f"    {line[:200]}" for line in failed.stderr.strip().splitlines()[-5:]]
    lines += _cause_lines(report)
    if report.locate is not None:
        from .located import render as located_lines

        lines += located_lines(report.located, report.locate)
    if report.recorded is not None:
        from .located import recorded_line

        lines.append(recorded_line(report.recorded))
    lines += _experiment_lines(report)
    lines += [f"warning: {warning}" for warning in report.warnings]
    lines += _masked_lines(report)
    lines += _fingerprint_lines(report.fingerprint, len(report.runs))
    if report.seeds:
        lines.append("seeds:")
        for row in report.seeds:
            lines.append(f"  run {row['run']}, pid {row['pid']} ({row['command']}): {row['source']}"
                         + "".join(f"; {seed['source']} seed {seed['value']} at {seed['where']}"
                                   for seed in row.get("seeds_set") or []))
    lines += [f"note: {note}" for note in report.notes]
    if report.not_checked:
        lines.append("not checked: " + "; ".join(report.not_checked))
    if report.verification:
        lines.append(verification_line(report.verification))
    return "\n".join(lines)


def _cause_lines(report: ReproReport) -> List[str]:
    if report.verdict != NOT_REPEATABLE:
        return []
    if not report.causes:
        return ["why: not looked for"]
    lines = ["why (confirmed by experiment first, then suspects):"]
    for number, cause in enumerate(report.causes, start=1):
        where = f" at {cause.where}" if cause.where else ""
        status = "confirmed" if cause.confirmed else "suspect"
        lines.append(f"  {number}. {cause.name}{where} [{status}]: {_summary(cause)}")
        lines += [f"     - {evidence}" for evidence in cause.evidence]
        if cause.fix:
            fix = cause.fix + (f" [tf-patches run {' '.join(cause.run_flags)}]" if cause.run_flags else "")
            lines.append(f"     fix: {fix}")
    for cause in report.ruled_out:
        where = f" at {cause.where}" if cause.where else ""
        lines.append(f"  ruled out: {cause.name}{where} ({'; '.join(cause.evidence[-1:])})")
    return lines


def _summary(cause: Cause) -> str:
    from .vocabulary import CAUSES

    kind = CAUSES.get(cause.name)
    return kind.summary if kind else ""


def _experiment_lines(report: ReproReport) -> List[str]:
    if not report.experiments:
        return []
    lines = ["experiments (the command again, with one knob turned):"]
    for experiment in report.experiments:
        lines.append(f"  {experiment.words}: {experiment.runs} runs, {experiment.verdict}"
                     + (f" ({experiment.summary})" if experiment.verdict != REPEATABLE and experiment.summary else ""))
    return lines


def _masked_lines(report: ReproReport) -> List[str]:
    if not report.masked:
        return []
    lines = [f"masked: {len(report.masked)} line{'s' if len(report.masked) != 1 else ''} differed only "
             "in what varies by itself (listed in the JSON's masked):"]
    for item in report.masked[:_MAX_MASKED_SHOWN]:
        lines.append(f"  {item.stream} line {item.line} ({', '.join(item.masks) or 'masked'}): "
                     f"{quoted(item.values[0], 60)} vs {quoted(item.values[1], 60)}")
    return lines


def verification_line(verification: Verification) -> str:
    head = f"--verify: {joined(verification.command or [])}: "
    if verification.verdict is None:
        return head + (verification.summary or "not run")
    text = head + f"{verification.verdict}: {verification.summary}"
    if verification.not_the_cause:
        text += f" (not alone the cause: {', '.join(verification.not_the_cause)})"
    if verification.traps_left:
        text += f" (still sprang: {', '.join(verification.traps_left)})"
    return text


def joined(command: Sequence[str]) -> str:
    return shlex.join(str(part) for part in command)


def _short(argv: Sequence[str], limit: int = 60) -> str:
    text = joined(argv)
    return text if len(text) <= limit else text[:limit - 1] + "…"


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


__all__ = ["build", "render", "traps_of", "seed_source", "their_fingerprint", "verification_line", "joined",
           "NOT_CHECKED"]
