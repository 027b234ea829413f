"""The verdict: whether the runs repeat, what was compared, where they first differ, and every
line whose printed difference a mask hid (so a "repeatable" that rests on masking can be
checked). Runs that fail alike are compared like any others; fewer than two finished runs, a run
that could not start or timed out, or a ``--compare`` path no run wrote leave the verdict "not
checked"."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import datafiles
from .masking import Masker, compare_texts, line_count, quoted
from .model import NOT_CHECKED, NOT_REPEATABLE, REPEATABLE, MaskedLine
from .runner import Run

_MAX_MASKED = 50  # lines listed in "masked"


@dataclass
class Comparison:
    verdict: str = NOT_CHECKED
    summary: str = ""
    first_difference: Optional[Dict[str, Any]] = None
    masked: List[MaskedLine] = field(default_factory=list)
    not_checked: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)


def masker_for(runs: Sequence[Run], base: Masker) -> Masker:
    """``base`` with the runs' PIDs and the window of their clocks (times inside it are masked)."""
    pids = tuple(pid for run in runs for pid in run.pids()) + base.pids
    starts = [getattr(run, "started_at", 0.0) for run in runs if getattr(run, "started_at", 0.0)]
    ends = [getattr(run, "ended_at", 0.0) for run in runs if getattr(run, "ended_at", 0.0)]
    window = (min(starts), max(ends)) if starts and ends else getattr(base, "window", None)
    try:
        return Masker(base.ignore, pids, window=window)
    except TypeError:  # a Masker without windows
        return Masker(base.ignore, pids)


def compare(runs: Sequence[Run], compare_paths: Sequence[str], masker: Masker, compare_stderr: bool) -> Comparison:
    """Run 1 against each later run: exit status, standard output (and error), then the files."""
    result = Comparison()
    unusable = _unusable(runs)
    if unusable:
        result.summary = unusable
        return result
    masker = masker_for(runs, masker)
    first = runs[0]
    streams: List[Tuple[str, Callable[[Run], str]]] = [("stdout", lambda run: run.stdout)]
    if compare_stderr:
        streams.append(("stderr", lambda run: run.stderr))
    texts = {name: read(first) for name, read in streams}
    unwritten = [path for path in compare_paths if all(run.files.get(path) is None for run in runs)]
    for run in runs[1:]:
        if run.status != first.status:
            result.verdict = NOT_REPEATABLE
            result.summary = f"run 1 ended with {first.failure()}, run {run.number} with {run.failure()}"
            result.first_difference = {"stream": "exit status", "run": run.number, "line": None,
                                       "values": [first.status, run.status]}
            return result
        for name, read in streams:
            found, masked = compare_texts(texts[name], read(run), masker, _MAX_MASKED - len(result.masked))
            result.masked += [MaskedLine(name, line.line, run.number, (line.first, line.other), tuple(line.masks))
                              for line in masked]
            if found is not None:
                result.verdict = NOT_REPEATABLE
                which = f" of run {run.number}" if run.number != 2 else ""
                result.summary = (f"first difference at {name} line {found.line}{which} "
                                  f"({quoted(found.first)} vs {quoted(found.other)})")
                result.first_difference = {"stream": name, "run": run.number, "line": found.line,
                                           "values": [found.first, found.other]}
                return result
        for path in compare_paths:
            if path in unwritten:
                continue
            file_notes: List[str] = []
            found_file = datafiles.compare(path, first.files.get(path), run.files.get(path), run.number, file_notes)
            result.notes.extend(note for note in file_notes if note not in result.notes)
            if found_file is not None:
                result.verdict = NOT_REPEATABLE
                at = f" array {found_file.array!r}" if found_file.array else ""
                at += f" at index {found_file.index}" if found_file.index is not None else ""
                result.summary = f"first difference in {path}{at} ({found_file.first} vs {found_file.other})"
                result.first_difference = {**found_file.to_dict(), "line": None}
                return result
    if unwritten:
        why = [f"--compare {path}: {_not_written(path, runs)}" for path in unwritten]
        result.not_checked += why
        said = ("; ".join(why) if any(not line.endswith(": no run wrote it") for line in why)
                else f"--compare {', '.join(unwritten)}: no run wrote it")
        result.summary = f"{said}, so it was not compared (the {len(runs)} runs' other outputs are identical)"
        return result
    result.verdict = REPEATABLE
    counted = [f"stdout {_count(line_count(texts['stdout']), 'line')}"]
    if compare_stderr:
        counted.append(f"stderr {_count(line_count(texts['stderr']), 'line')}")
    if compare_paths:
        counted.append(_count(len(compare_paths), "file"))
    result.summary = f"{len(runs)} runs identical ({', '.join(counted)})"
    if result.masked:
        result.summary += f"; {_count(len(result.masked), 'line')} equal only once masked (see masked)"
    return result


def _not_written(path: str, runs: Sequence[Run]) -> str:
    """Why no run left ``path`` to compare: what a run left there instead of a file (a FIFO, a
    link to a device: the note datafiles.keep made), or that no run wrote it."""
    for run in runs:
        for note in run.notes:
            where, _, what = note.partition(": ")
            if what.endswith(", not compared") and (where == path or where.endswith(os.sep + path)):
                return f"a run left {what[:-len(', not compared')]} there, not a file"
    return "no run wrote it"


def _unusable(runs: Sequence[Run]) -> str:
    """Why these runs cannot be compared at all, or ""."""
    for run in runs:
        if run.returncode is None:
            return f"run {run.number} could not start ({run.failure()}): nothing to compare"
        if run.timed_out:
            return f"run {run.number} {run.failure()}: its output is cut short, nothing to compare"
    if len(runs) < 2:
        return (f"only {len(runs)} run finished (the series was stopped): one run is no comparison"
                if runs else "no run finished")
    return ""


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'s' if number != 1 else ''}"
