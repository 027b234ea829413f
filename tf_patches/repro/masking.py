"""Standard output as a user compares it: the final state of each line (progress bars redrawn
with ``\\r`` and backspaces, colours dropped), with what varies from run to run whatever the
program does masked: durations and rates (``12ms/step``, ``ETA: 3s``, ``9.5it/s``), dates and
times of day, PIDs, memory addresses, temporary paths, UUIDs, and the user's own ``--ignore``
patterns."""

from __future__ import annotations

import functools
import json
import re
import tempfile
from dataclasses import dataclass
from typing import Iterable, List, Optional, Pattern, Sequence, Tuple

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]")
_UNITS = r"(?:ns|us|µs|ms|s|sec|secs|seconds?|mins?|minutes?|h|hours?)"
# Each (pattern, replacement), applied in order: the longer forms first.
MASKS: Tuple[Tuple[Pattern[str], str], ...] = tuple((re.compile(pattern), replacement) for pattern, replacement in (
    # Dates and times of day: ISO 8601, `date`'s and asctime's forms, clock times.
    (r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:Z|[+-]\d\d:?\d\d)?", "<TIME>"),
    (r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)\w*,? +(?:\d{1,2} +)?(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\w* +"
     r"\d{1,2}(?: +\d{4})?", "<DATE>"),
    (r"\b\d{4}[-/]\d\d[-/]\d\d\b", "<DATE>"),
    (r"\b\d{1,2}:\d\d:\d\d(?:[.,]\d+)?\b", "<TIME>"),
    # tqdm's [elapsed<remaining, rate]; Keras' ETA.
    (r"\[\d+:\d\d(?::\d\d)?<[\d:?]+", "[<ELAPSED>"),
    (r"\bETA:? *(?:\d+:)*\d+(?:\.\d+)? *" + _UNITS + r"?", "ETA <DURATION>"),
    # Rates and durations: 12ms/step, 1s, 0.53 seconds, 9.5it/s, 3.1 s/it, 120 MB/s.
    (r"\b\d+(?:\.\d+)?(?:e[-+]?\d+)? ?(?:it|its|samples?|steps?|examples?|images?|img|batch(?:es)?|tokens?|"
     r"B|[KMGT]i?B|[KMGT]b)/s(?:ec)?\b", "<RATE>"),
    (r"\b\d+(?:\.\d+)?(?:e[-+]?\d+)? ?s/(?:it|step|batch)\b", "<RATE>"),
    (r"\b\d+(?:\.\d+)?(?:e[-+]?\d+)? ?" + _UNITS + r"(?:/(?:step|sample|epoch|it|batch|iter))?(?![\w/])",
     "<DURATION>"),
    # Where and who: PIDs, memory addresses, UUIDs, temporary paths.
    (r"\b(?:[Pp]id|PID|process id)[ :=#]*\d+", "pid <PID>"),
    (r"\b0x[0-9a-fA-F]{6,}\b", "<ADDRESS>"),
    (r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "<UUID>"),
))
_TEMPORARY = ("/tmp/", "/var/tmp/", "/var/folders/", "/private/var/folders/", "/dev/shm/")


@dataclass(frozen=True)
class Masker:
    """How the lines of one comparison are masked: the fixed masks, the run's PIDs, the temporary
    folders, and the user's ``--ignore`` patterns."""

    ignore: Tuple[Pattern[str], ...] = ()
    pids: Tuple[int, ...] = ()

    def mask(self, line: str) -> str:
        for pattern in self.ignore:
            line = pattern.sub("<IGNORED>", line)
        for pattern, replacement in MASKS:
            line = pattern.sub(replacement, line)
        line = _temporary_paths().sub("<TMP>", line)
        if self.pids:
            line = _pids(self.pids).sub("<PID>", line)
        return line


def compile_ignores(patterns: Iterable[str]) -> Tuple[Pattern[str], ...]:
    """The ``--ignore`` patterns compiled; a bad one raises ValueError naming it."""
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise ValueError(f"--ignore {pattern!r}: not a regular expression: {exc}") from None
    return tuple(compiled)


def final_lines(text: str) -> List[str]:
    """Each line as a terminal would leave it: the last redraw after ``\\r`` (a progress bar's
    intermediate states come and go with the timing), backspaces applied, colours dropped,
    trailing blanks stripped."""
    lines = []
    for line in text.split("\n"):
        segments = [segment for segment in line.split("\r") if segment.strip()]
        line = segments[-1] if segments else ""
        if "\b" in line:
            kept: List[str] = []
            for char in line:
                if char == "\b":
                    if kept:
                        kept.pop()
                else:
                    kept.append(char)
            line = "".join(kept)
        lines.append(_ANSI.sub("", line).rstrip())
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return lines


@dataclass(frozen=True)
class LineDifference:
    """The first line at which two outputs differ (1-based), as each run printed it (None where a
    run's output had ended)."""

    line: int
    first: Optional[str]
    other: Optional[str]


def first_difference(first: Sequence[str], other: Sequence[str], masker: Masker) -> Optional[LineDifference]:
    """Where two outputs (their :func:`final_lines`) first differ once masked, or None."""
    for index in range(max(len(first), len(other))):
        a = first[index] if index < len(first) else None
        b = other[index] if index < len(other) else None
        if a is None or b is None or masker.mask(a) != masker.mask(b):
            return LineDifference(index + 1, a, b)
    return None


def quoted(line: Optional[str], limit: int = 100) -> str:
    """A line for the report: quoted, shortened to ``limit`` characters."""
    if line is None:
        return "(no line: the output had ended)"
    text = line.strip()
    return json.dumps(text if len(text) <= limit else text[:limit - 1] + "…", ensure_ascii=False)


@functools.lru_cache(maxsize=None)  # mask() runs per line: compile once
def _temporary_paths() -> Pattern[str]:
    folders = list(_TEMPORARY)
    own = tempfile.gettempdir().rstrip("/") + "/"
    if own not in folders:
        folders.append(own)
    return re.compile("(?:" + "|".join(re.escape(folder) for folder in folders) + r")[^\s'\"),:;\]]+")


@functools.lru_cache(maxsize=16)  # per comparison's PIDs, not per line
def _pids(pids: Tuple[int, ...]) -> Pattern[str]:
    # A whole number only: not the digits of a float ("0.12345") that happen to be a PID.
    return re.compile(r"(?<![\w.])(?:" + "|".join(str(pid) for pid in sorted(set(pids), reverse=True))
                      + r")(?![\w]|\.\d)")
