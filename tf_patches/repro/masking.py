"""Standard output as a user compares it, and what is masked before two runs' lines are compared.

Lines are what a terminal would show (:func:`final_lines`: ``\\r`` and backspaces move the cursor
and later text overwrites earlier text, colours dropped). Then what varies from run to run
whatever the program does is masked, each mask with a name (:data:`MASK_NAMES`) so a report can
say which masks made two differing lines equal (:func:`masked_lines`).

Masks must not lie in either direction, so each is as narrow as the evidence allows:

- times: ISO and ``date`` forms, clock times, compact stamps (``20261127-161203``: TensorBoard's
  log folders) that are plausible dates, and epoch seconds or milliseconds only inside the runs'
  own time ``window``;
- durations (``11.1 min``) only on a line about timing (a progress bar, "took", "ETA", per-step
  times): the same text on a result line ("predicted wait: 11.1 min") is a result. Rates
  (``9.5it/s``) and per-unit times (``12ms/step``) are always timing;
- PIDs only where they stand as a PID (``pid 123``, ``/proc/123/``, a log prefix ``[123]`` that
  is a run's PID) or where a run's PID is large enough not to be an ordinary count: in a container
  the runs are PIDs 2, 3, … and "2 of 10" vs "3 of 10" is a real difference;
- temporary paths: the random folder (``tmpab12cd34``, ``pytest-3``, a ``mkdtemp`` name), never
  the file name after it.

Outputs are compared as given first (:func:`compare_texts`): only from the first differing
character on are lines rendered, and masks (a dozen regular expressions) run only on lines that
differ, on a long line only around where it differs (:func:`masked_equal`).
"""

from __future__ import annotations

import functools
import json
import re
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Iterable, List, Match, Optional, Pattern, Sequence, Tuple

# The masks' names, as the report lists them under "masked".
TIME, DATE, DURATION, RATE, PID, ADDRESS, UUID, TEMPORARY_PATH, IGNORED = (
    "time", "date", "duration", "rate", "pid", "address", "uuid", "temporary path", "ignored")
MASK_NAMES: Tuple[str, ...] = (TIME, DATE, DURATION, RATE, PID, ADDRESS, UUID, TEMPORARY_PATH, IGNORED)

WINDOW_MARGIN = 3600.0  # seconds either side of the runs' window: clocks skew, programs print start times
LARGE_PID = 1000  # a run's PID at least this large is masked wherever it stands as a whole number

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\x1b[=>78]")
_UNITS = r"(?:ns|us|µs|ms|s|sec|secs|seconds?|m|mins?|minutes?|h|hrs?|hours?)"
_NUMBER = r"\d+(?:\.\d+)?(?:e[-+]?\d+)?"


@dataclass(frozen=True)
class _Mask:
    name: str
    pattern: Pattern[str]
    replacement: str
    needs: Tuple[str, ...] = ()  # text the line must hold one of for the pattern to match: a quick test first


def _mask(name: str, pattern: str, replacement: str, flags: int = 0, needs: Tuple[str, ...] = ()) -> _Mask:
    return _Mask(name, re.compile(pattern, flags), replacement, needs)


# glog/absl's prefix (TF's C++ start-up lines): "I1127 16:12:03.123456  140234 file.cc:12]", its
# time and thread id; TF's earliest lines print "I0000 00:00:1764262323.123456". First: whole.
# Every mask matches within one line (MULTILINE "^", no "\s" that could take a newline): masked
# as a block of lines joined, the lines come out as each masked alone (:func:`_block_equal`).
_LOG_PREFIX = _mask(TIME, r"^([IWEF])\d{4} +\d\d:\d\d:\d+(?:\.\d+)? +\d+ (?=[^\s:]+:\d+\])",
                    r"\1<TIME> <THREAD> ", re.MULTILINE)
# Masked on every line, in this order (the longer forms first).
_ALWAYS: Tuple[_Mask, ...] = (
    # Dates and times of day: ISO 8601, `date`'s and asctime's forms, clock times.
    _mask(TIME, r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:Z|[+-]\d\d:?\d\d)?", "<TIME>", needs=(":",)),
    _mask(DATE, r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)\w*,? +(?:\d{1,2} +)?(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct"
                r"|Nov|Dec)\w* +\d{1,2}(?: +\d{4})?", "<DATE>", needs=("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")),
    _mask(DATE, r"\b\d{4}[-/]\d\d[-/]\d\d\b", "<DATE>", needs=("-", "/")),
    _mask(TIME, r"\b\d{1,2}:\d\d:\d\d(?:[.,]\d+)?\b", "<TIME>", needs=(":",)),
    # tqdm's [elapsed<remaining, rate]; Keras' ETA.
    _mask(DURATION, r"\[\d+:\d\d(?::\d\d)?<[\d:?]+", "[<ELAPSED>", needs=("<",)),
    _mask(DURATION, r"\bETA:? *(?:\d+:)*\d+(?:\.\d+)? *" + _UNITS + r"?", "ETA <DURATION>", needs=("ETA",)),
    # Rates and per-unit times are timing wherever they stand: 9.5it/s, 120 MB/s, 3.1 s/it, 12ms/step.
    _mask(RATE, r"\b" + _NUMBER + r" ?(?:it|its|samples?|steps?|examples?|images?|img|batch(?:es)?|tokens?|"
                r"B|[KMGT]i?B|[KMGT]b)/s(?:ec)?\b", "<RATE>", needs=("/s",)),
    _mask(RATE, r"\b" + _NUMBER + r" ?s/(?:it|step|batch)\b", "<RATE>", needs=("s/",)),
    _mask(DURATION, r"\b" + _NUMBER + r" ?" + _UNITS + r"/(?:step|sample|epoch|it|batch|iter)(?![\w/])",
          "<DURATION>", needs=("/",)),
    # Who: where a number stands as a PID. A bare "[123]" only as a run's PID (see _prefix_pids).
    _mask(PID, r"\b(?:pid|process(?: id)?)\b[ :=#]*\d+", "pid <PID>", re.IGNORECASE),
    _mask(PID, r"/proc/\d+(?=/|\b)", "/proc/<PID>", needs=("/proc/",)),
    _mask(PID, r"(tfevents\.\d+\.[^.\s/]+\.)\d+(?=\.)", r"\1<PID>", needs=("tfevents.",)),  # events.out.tfevents.T.HOST.PID.
    # Where: memory addresses, UUIDs.
    _mask(ADDRESS, r"\b0x[0-9a-fA-F]{6,}\b", "<ADDRESS>", needs=("0x",)),
    _mask(UUID, r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b", "<UUID>", needs=("-",)),
)

# A duration standing alone ("1s", "11.1 min"): masked only on a line about timing.
_DURATION = re.compile(r"\b" + _NUMBER + r" ?" + _UNITS + r"(?![\w/])")
_DURATION_HINT = re.compile(r"\d ?[nuµmsh]")  # what any of them holds: a test 4x quicker
_TIMING_LINE = re.compile(
    r"^\s*\d+/\d+\s+(?:\[|━|─|-\s)"  # Keras' progress bar: "8/8 [====] - 1s", "8/8 ━━━ 1s", "8/8 - 1s"
    r"|\d+%\|"  # tqdm's "100%|####|"
    r"|\bETA\b|/(?:step|sample|epoch|it|batch|iter)\b|\bit/s\b|\bs/it\b"
    r"|\b(?:took|takes|take|taking|elapsed|time|times|timing|timings|timed|duration|runtime|run time|wall|walltime"
    r"|wall-clock|wall time|latency|seconds per|minutes per|per (?:step|epoch|sample|batch|iteration|image))\b"
    r"|\b(?:finished|completed|done|ran|trained|ended|returned|executed) in\b"
    r"|\bin " + _NUMBER + r" ?" + _UNITS + r"\b",
    re.IGNORECASE)

# Compact timestamps: 20261127-161203, 20261127_161203, 20261127161203, 20261127T161203.
_COMPACT = re.compile(r"(?<!\d)(\d{4})(\d\d)(\d\d)([-_T]?)(\d\d)(\d\d)(\d\d)(?!\d)")
# Epoch seconds (10 digits, a fraction allowed) and milliseconds (13 digits), not inside a longer number.
_EPOCH = re.compile(r"(?<!\d)(?<!\d\.)(?:\d{10}(?:\.\d+)?|\d{13})(?![\d])")
# The random folder that mkdtemp, TemporaryDirectory (tmpXXXXXXXX, or PREFIX + 8 random characters),
# mktemp -d (tmp.XXXXXXXXXX) and pytest (pytest-N) make directly in the temporary folder; deeper
# down only the unmistakable forms (a folder "layer_features" there is the program's own).
_RANDOM_TOP = re.compile(r"^(?:tmp[a-z0-9_]{6,12}|.*?[-_.][a-z0-9_]{8}|tmp\.[A-Za-z0-9]{10}|pytest-\d+)$")
_RANDOM_DEEPER = re.compile(r"^(?:tmp[a-z0-9_]{6,12}|.*?[-_.](?=[a-z_]*\d)[a-z0-9_]{8}|pytest-\d+)$")
_RANDOM_FILE = re.compile(r"^tmp[a-z0-9_]{8}(?=\.|$)")  # NamedTemporaryFile's tmpXXXXXXXX(.suffix)


@dataclass(frozen=True)
class Masker:
    """How the lines of one comparison are masked: the fixed masks, the runs' PIDs, the window of
    the runs' clocks (epoch seconds from its start to its end, None: epoch numbers are not masked)
    and the user's ``--ignore`` patterns."""

    ignore: Tuple[Pattern[str], ...] = ()
    pids: Tuple[int, ...] = ()
    window: Optional[Tuple[float, float]] = None

    def mask(self, line: str) -> str:
        return self.explain(line)[0]

    def explain(self, line: str, timing: Optional[bool] = None) -> Tuple[str, Tuple[str, ...]]:
        """The masked line, and the names of the masks that changed it (in the order applied).
        ``timing``: whether the whole line is about timing, where ``line`` is a piece of it."""
        printed = line
        names: List[str] = []
        for name, change, timing_only, needs, _ in _steps(self.ignore, self.window, tuple(sorted(set(self.pids)))):
            if needs and not any(text in line for text in needs):  # cannot match: a regex spared
                continue
            if timing_only:  # judged on the line as printed (a slow search: made only where a
                if _DURATION_HINT.search(line) is None:  # duration may stand)
                    continue
                if timing is None:
                    timing = _TIMING_LINE.search(printed) is not None
                if not timing:
                    continue
            changed = change(line)
            if changed != line:
                line = changed
                if name not in names:
                    names.append(name)
        return line, tuple(names)


@functools.lru_cache(maxsize=16)  # per comparison, not per line
def _steps(ignore: Tuple[Pattern[str], ...], window: Optional[Tuple[float, float]],
           pids: Tuple[int, ...]) -> Tuple[Tuple[str, Callable[[str], str], bool, Tuple[str, ...], Tuple[str, ...]], ...]:
    """The masks in the order they apply: each one's name, what it does, whether only on a
    timing line, what a line must hold for it to change anything, and what its shape (its digits
    as 0, after a newline) must hold (a test made on a block of lines, :func:`_block_equal`)."""
    first: List[Tuple[str, Callable[[str], str], Tuple[str, ...]]] = [
        *((IGNORED, functools.partial(pattern.sub, "<IGNORED>"), ()) for pattern in ignore),
        (_LOG_PREFIX.name, functools.partial(_LOG_PREFIX.pattern.sub, _LOG_PREFIX.replacement),
         ("\nI0000 ",)),  # "I1127 " (or W, E, F) starting a line
        (TEMPORARY_PATH, _temporary_paths, ()), (TIME, _compact_times, ("0" * 8,))]  # 20261127-...
    if window is not None:
        first.append((TIME, functools.partial(_epoch_times, window), ("0" * 10,)))
    steps = [(name, change, False, (), shapes) for name, change, shapes in first]
    steps += [(mask.name, functools.partial(mask.pattern.sub, mask.replacement), False, mask.needs, ())
              for mask in _ALWAYS]
    steps.append((DURATION, functools.partial(_DURATION.sub, "<DURATION>"), True, (), ()))
    if pids:
        steps.append((PID, functools.partial(_run_pids, pids), False, (), ()))
    return tuple(steps)


@dataclass(frozen=True)
class MaskedLine:
    """A line (1-based) that differs between two runs as printed, equal once masked, and the
    masks that changed either run's line."""

    line: int
    first: str
    other: str
    masks: Tuple[str, ...]


def masked_lines(first: Sequence[str], other: Sequence[str], masker: Masker,
                 limit: Optional[int] = None) -> List[MaskedLine]:
    """The lines at the same place in both outputs that differ as printed but are equal once
    masked (at most ``limit`` of them): what a "repeatable" verdict rests on masking for."""
    found: List[MaskedLine] = []
    for index, (a, b) in enumerate(zip(first, other)):
        if a == b:
            continue
        names = masked_equal(a, b, masker)
        if names is not None:
            found.append(MaskedLine(index + 1, a, b, names))
            if limit is not None and len(found) >= limit:
                break
    return found


def masked_equal(a: str, b: str, masker: Masker) -> Optional[Tuple[str, ...]]:
    """Whether two differing lines are equal once masked: the masks that made them so, or None.
    A long line is masked only around where it differs (:func:`_windows`)."""
    if len(a) + len(b) <= 2 * LONG_LINE:
        masked_a, names_a = masker.explain(a)
        masked_b, names_b = masker.explain(b)
        return tuple(dict.fromkeys(names_a + names_b)) if masked_a == masked_b else None
    start, end_a, end_b = _windows(a, b)
    window_a, window_b = a[start:end_a], b[start:end_b]
    # Durations are masked only on a timing line, which is judged on the whole line: a search of
    # seconds on 10 MB, done only where the windows differ without that mask (equal strings stay
    # equal) and hold a duration it could mask.
    masked_a, names_a = masker.explain(window_a, timing=False)
    masked_b, names_b = masker.explain(window_b, timing=False)
    if masked_a != masked_b and (_DURATION.search(window_a) or _DURATION.search(window_b)):
        around = _TIMING_LINE.search(a, 0, start) is not None or _TIMING_LINE.search(a, end_a) is not None
        masked_a, names_a = masker.explain(window_a, timing=around or _TIMING_LINE.search(window_a) is not None)
        masked_b, names_b = masker.explain(window_b, timing=around or _TIMING_LINE.search(window_b) is not None)
    if masked_a != masked_b:
        return None
    return tuple(dict.fromkeys(names_a + names_b))


LONG_LINE = 4096  # longer lines are masked only around where they differ
CONTEXT_WORDS = 8  # blank-separated words kept either side of that: more than any mask spans


def _windows(a: str, b: str) -> Tuple[int, int, int]:
    """Where two lines that share a beginning and an end differ, widened by ``CONTEXT_WORDS``
    words either side, cut only at a blank: ``a[start:end_a]`` and ``b[start:end_b]``. The
    window starts at a blank (so ``^`` and look-behinds see no false line start) and outside it the
    lines are the same text, which every mask changes alike. Masks match within a few words, so
    one that touches the difference lies inside the window. (A log prefix ``[PID:name with many
    words]`` wider than that would not: it is masked on short lines only.)"""
    head = common_prefix(a, b)
    tail = common_suffix(a, b, min(len(a), len(b)) - head)
    start = head
    for _ in range(CONTEXT_WORDS):
        start = max(a.rfind(" ", 0, start), a.rfind("\t", 0, start))
        if start <= 0:
            start = 0
            break
    end = len(a) - tail  # in a; the same place counted from the end in b
    for _ in range(CONTEXT_WORDS):
        found = [at for at in (a.find(" ", end + 1), a.find("\t", end + 1)) if at >= 0]
        if not found:
            end = len(a)
            break
        end = min(found)
    return start, end, len(b) - (len(a) - end)


def common_prefix(a: Any, b: Any) -> int:
    """How many first characters (or bytes) ``a`` and ``b`` share: slices compared by halves (the
    comparisons run in C: a 100 MB string in well under a second, where a loop took a minute)."""
    low, high = 0, min(len(a), len(b))
    if a[:high] == b[:high]:
        return high
    while high - low > 1:  # a[:low] == b[:low]; a[low:high] != b[low:high]
        middle = (low + high) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle
    return low


def common_suffix(a: Any, b: Any, limit: int) -> int:
    """How many last characters ``a`` and ``b`` share, at most ``limit``."""
    low, high = 0, limit
    if high == 0 or a[len(a) - high:] == b[len(b) - high:]:
        return high
    while high - low > 1:  # the last low equal; the last high not
        middle = (low + high) // 2
        if a[len(a) - middle:len(a) - low] == b[len(b) - middle:len(b) - low]:
            low = middle
        else:
            high = middle
    return low


def compare_texts(first: str, other: str, masker: Masker, limit: int = 50
                  ) -> Tuple[Optional["LineDifference"], List[MaskedLine]]:
    """Two runs' output compared as :func:`first_difference` and :func:`masked_lines` compare
    their :func:`final_lines`, without rendering or masking what is the same: the lines before the
    first differing character are equal as printed (none is masked); from there a line is rendered
    only where its characters differ, and masked only where it differs as rendered. The first
    difference, and the masked lines before it (at most ``limit``)."""
    if first == other:
        return None, []
    start = first.rfind("\n", 0, common_prefix(first, other)) + 1  # the line holding the first difference
    offset = first.count("\n", 0, start)
    ours, theirs = _raw_lines(first[start:]), _raw_lines(other[start:])
    masked: List[MaskedLine] = []
    index, common = -1, min(len(ours), len(theirs))
    while index + 1 < max(len(ours), len(theirs)):
        index += 1
        if len(masked) >= limit and index < common:  # nothing more to list: masked a block at a time
            index += _equal_lines(ours, theirs, index, min(index + BLOCK_LINES, common), masker)
            if index >= common:
                index -= 1
                continue
        a = ours[index] if index < len(ours) else None
        b = theirs[index] if index < len(theirs) else None
        if a == b:
            continue
        a, b = (None if a is None else _rendered(a)), (None if b is None else _rendered(b))
        if a == b:
            continue
        names = masked_equal(a, b, masker) if a is not None and b is not None else None
        if names is None:
            return LineDifference(offset + index + 1, a, b), masked
        if len(masked) < limit:
            masked.append(MaskedLine(offset + index + 1, a, b, names))
    return None, masked


BLOCK_LINES = 8192  # lines masked as one block once the lines to list are found


def _equal_lines(ours: List[str], theirs: List[str], start: int, end: int, masker: Masker) -> int:
    """How many lines from ``start`` (before ``end``) are equal once rendered and masked, judged
    a block at a time (:func:`_block_equal`); the caller judges the next one line by line. Lines
    long enough to be masked around their difference (:func:`masked_equal`) end a block."""
    judged = start
    while judged < end:
        a, b = ours[judged:end], theirs[judged:end]
        if a != b:
            a, b = _rendered_lines(a), _rendered_lines(b)
            if max(map(len, a)) + max(map(len, b)) > 2 * LONG_LINE:
                long = next(at for at, pair in enumerate(zip(a, b)) if len(pair[0]) + len(pair[1]) > 2 * LONG_LINE)
                if long == 0:
                    return judged - start
                a, b = a[:long], b[:long]
            differs = _block_equal(a, b, masker)
            if differs is not None:
                return judged + differs - start
        judged += len(a)
    return judged - start


def _rendered_lines(lines: List[str]) -> List[str]:
    """:func:`_rendered` of each line; lines with nothing to draw only stripped, by one test on
    them all."""
    joined = "\n".join(lines)
    if "\r" in joined or "\b" in joined or "\x1b" in joined:
        return [_rendered(line) for line in lines]
    return list(map(str.rstrip, lines))


def _block_equal(first: List[str], other: List[str], masker: Masker) -> Optional[int]:
    """Whether rendered lines are equal once masked, each mask run once over each side's lines
    joined rather than a dozen regular expressions per line (the cost of a log whose every line
    has its own time stamp): None, or the index of the first pair that differs. The same answer as
    :meth:`Masker.explain` line by line: every mask matches within a line, one that needs text a
    block lacks could change none of its lines, durations are masked only on lines about timing
    (judged on each printed line), and once the blocks are equal later masks keep them so."""
    steps = _steps(masker.ignore, masker.window, tuple(sorted(set(masker.pids))))
    ignored = len(masker.ignore)
    sides = []
    for lines in (first, other):
        for _, change, _, _, _ in steps[:ignored]:  # the user's patterns may span lines: line by line
            lines = [change(line) for line in lines]
        sides.append("\n".join(lines))
    a, b = sides
    # Each side's shape: ASCII digits as 0 (a translation at memory speed), so that "a run of 8
    # digits" or "a line starting I1127 " (or W, E, F) is one substring test. Masks only replace
    # text with placeholders: no later run of digits is longer, no line start changes before TF's
    # prefix.
    shape_a, shape_b = ("\n" + side.translate(_ZEROS) if side.isascii() else None for side in sides)
    timing_left = True
    for _, change, timing_only, needs, shapes in steps[ignored:]:
        if a == b and (not timing_left or not _may_hold_duration(a)):
            return None
        if timing_only:
            a, b = _durations(a, first, change), _durations(b, other, change)
            timing_left = False
            continue
        if _may_change(a, needs, shapes, shape_a):
            a = change(a)
        if _may_change(b, needs, shapes, shape_b):
            b = change(b)
    if a == b:
        return None
    return next(at for at, pair in enumerate(zip(a.split("\n"), b.split("\n"))) if pair[0] != pair[1])


_ZEROS = str.maketrans("123456789WEF", "000000000III")  # glog's severities as one letter too


def _may_change(block: str, needs: Tuple[str, ...], shapes: Tuple[str, ...], shape: Optional[str]) -> bool:
    """Whether a mask could change a line of ``block``: it holds one of ``needs``, and its
    ``shape`` (None where it is not ASCII) one of ``shapes``."""
    if needs and not any(text in block for text in needs):
        return False
    return not shapes or shape is None or any(text in shape for text in shapes)


_HINTS = str.maketrans("123456789umsh", "000000000nnnn")


def _may_hold_duration(block: str) -> bool:
    """``_DURATION_HINT.search(block)``, on an ASCII block as two substring tests (the search
    scans at regex speed, ~20x slower)."""
    if not block.isascii():
        return _DURATION_HINT.search(block) is not None
    hints = block.translate(_HINTS)
    return "0n" in hints or "0 n" in hints


def _durations(block: str, printed: List[str], change: Callable[[str], str]) -> str:
    """``change`` (the duration mask) applied to the lines of ``block`` whose printed line is about
    timing."""
    if not _may_hold_duration(block):
        return block
    lines = block.split("\n")
    for at, line in enumerate(lines):
        if _DURATION_HINT.search(line) is not None and _TIMING_LINE.search(printed[at]) is not None:
            lines[at] = change(line)
    return "\n".join(lines)


def line_count(text: str) -> int:
    """``len(final_lines(text))``, without rendering."""
    return text.count("\n") + (0 if _rendered(text[text.rfind("\n") + 1:]) == "" else 1)


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
    """Each line as a terminal leaves it: ``\\r`` returns the cursor to the line's start and
    backspace moves it one left, and what follows overwrites what was there (``"abcdef\\rxy"``
    shows ``"xycdef"``); colours dropped, ``ESC[K`` erases, trailing blanks stripped."""
    return _rendered_lines(_raw_lines(text))


def _raw_lines(text: str) -> List[str]:
    """The lines of ``text`` as printed, before rendering: one for each of :func:`final_lines`."""
    lines = text.split("\n")
    if lines and _rendered(lines[-1]) == "":
        lines.pop()  # the newline that ends the last line (or a last line that shows nothing)
    return lines


_ERASE = re.compile(r"\x1b\[([012]?)K")


def _rendered(line: str) -> str:
    if "\r" not in line and "\b" not in line and "\x1b" not in line:
        return line.rstrip()  # the common case, at full speed
    cells: List[str] = []
    cursor = 0
    for kind, text in _tokens(line):
        if kind == "erase":
            if text in ("", "0"):
                del cells[cursor:]
            elif text == "1":
                cells[:cursor + 1] = [" "] * len(cells[:cursor + 1])
            else:
                cells = [" "] * len(cells)
            continue
        for index, piece in enumerate(text.split("\r")):
            if index:
                cursor = 0
            cursor = _write(cells, cursor, piece)
    return "".join(cells).rstrip()


def _write(cells: List[str], cursor: int, text: str) -> int:
    """``text`` written over ``cells`` from ``cursor`` (backspace moves it one left); the cursor
    after. Runs without a backspace are written as one slice: a 10 MB line redrawn stays fast."""
    for index, run in enumerate(text.split("\b")):
        if index:
            cursor = max(0, cursor - 1)
        if not run:
            continue
        if cursor > len(cells):
            cells.extend(" " * (cursor - len(cells)))
        cells[cursor:cursor + len(run)] = run
        cursor += len(run)
    return cursor


def _tokens(line: str) -> List[Tuple[str, str]]:
    """The line as ("text", characters) and ("erase", ESC[K's argument), other escapes dropped."""
    tokens: List[Tuple[str, str]] = []
    position = 0
    for match in _ERASE.finditer(line):
        tokens.append(("text", _ANSI.sub("", line[position:match.start()])))
        tokens.append(("erase", match.group(1)))
        position = match.end()
    tokens.append(("text", _ANSI.sub("", line[position:])))
    return tokens


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
        if a == b:
            continue  # equal as printed: no mask needed
        if a is None or b is None or masked_equal(a, b, masker) is None:
            return LineDifference(index + 1, a, b)
    return None


def quoted(line: Optional[str], limit: int = 100) -> str:
    """A line for the report: quoted, shortened to ``limit`` characters; bytes that were not
    UTF-8 (kept as surrogates by the runner) shown as ``\\xff``."""
    if line is None:
        return "(no line: the output had ended)"
    text = line.strip()
    return visible(json.dumps(text if len(text) <= limit else text[:limit - 1] + "…", ensure_ascii=False))


def visible(text: str) -> str:
    """``text`` with the undecodable bytes the runner kept (``errors="surrogateescape"``) written
    as ``\\xNN``: printable and writable as UTF-8."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


# -- the masks that need more than a substitution -----------------------------------------------
def _compact_times(line: str) -> str:
    return _COMPACT.sub(_compact_time, line) if len(line) >= 14 else line


def _compact_time(match: Match[str]) -> str:
    year, month, day, _, hour, minute, second = match.groups()
    plausible = (1970 <= int(year) <= 2200 and 1 <= int(month) <= 12 and 1 <= int(day) <= 31
                 and int(hour) < 24 and int(minute) < 60 and int(second) < 61)
    return "<TIME>" if plausible else match.group(0)


def _epoch_times(window: Tuple[float, float], line: str) -> str:
    earliest, latest = window[0] - WINDOW_MARGIN, window[1] + WINDOW_MARGIN

    def inside(match: Match[str]) -> str:
        text = match.group(0)
        seconds = float(text) / (1000.0 if len(text) == 13 and "." not in text else 1.0)
        return "<TIME>" if earliest <= seconds <= latest else text

    return _EPOCH.sub(inside, line)


def _temporary_paths(line: str) -> str:
    """Each temporary path with its random folders masked and the rest (the file's name) kept."""
    if "/" not in line:
        return line
    return _temporary_roots().sub(_temporary_path, line)


def _temporary_path(match: Match[str]) -> str:
    root, rest = match.group(1), match.group(2)
    parts = rest.split("/")
    masked = []
    for index, part in enumerate(parts):
        folder = (_RANDOM_TOP if index == 0 else _RANDOM_DEEPER).match(part)
        if folder and (index < len(parts) - 1 or index == 0):  # a folder; or the temporary folder itself
            masked.append("<TMP>")
        elif index == len(parts) - 1 and _RANDOM_FILE.match(part):
            masked.append(_RANDOM_FILE.sub("<TMP>", part))
        else:
            masked.append(part)
    return root + "/".join(masked)


@functools.lru_cache(maxsize=None)  # mask() runs per differing line: compile once
def _temporary_roots() -> Pattern[str]:
    folders = ["/tmp/", "/var/tmp/", "/var/folders/", "/private/var/folders/", "/dev/shm/"]
    own = tempfile.gettempdir().rstrip("/") + "/"
    if own not in folders:
        folders.append(own)
    roots = "|".join(re.escape(folder) for folder in sorted(folders, key=len, reverse=True))
    return re.compile(r"(?<![\w.])(" + roots + r")([^\s'\"),:;\]]+)")


def _run_pids(pids: Tuple[int, ...], line: str) -> str:
    if not any(str(pid) in line for pid in pids):  # the common case, without two long alternations
        return line
    line = _prefix_pids(pids).sub(
        lambda match: match.group(0)[:match.start(1) - match.start()] + "<PID>", line)
    large = tuple(pid for pid in pids if pid >= LARGE_PID)
    return _whole_numbers(large).sub("<PID>", line) if large else line


@functools.lru_cache(maxsize=16)  # per comparison's PIDs, not per line
def _prefix_pids(pids: Tuple[int, ...]) -> Pattern[str]:
    """A run's PID in brackets where a log format puts it: "[123] msg" or "[123:thread] msg"
    (at the start or after a blank), "name[123]: msg" (syslog). Not "a[2] = 1" nor "[2]" alone."""
    numbers = "(?:" + "|".join(str(pid) for pid in sorted(pids, reverse=True)) + ")"
    prefix = r"(?:^|(?<=\s))\[(?=" + numbers + r"(?:\][^\S\n]+\S|(?::|[^\S\n])[^\]\n]*\]))"  # within a line
    syslog = r"\b[A-Za-z][\w.-]*\[(?=" + numbers + r"\]:)"
    return re.compile(f"(?:{prefix}|{syslog})({numbers})")


@functools.lru_cache(maxsize=16)
def _whole_numbers(pids: Tuple[int, ...]) -> Pattern[str]:
    # A whole number only: not the digits of a float ("0.12345") that happen to be a PID.
    return re.compile(r"(?<![\w.])(?:" + "|".join(str(pid) for pid in sorted(pids, reverse=True))
                      + r")(?![\w]|\.\d)")
