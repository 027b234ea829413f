"""Reproducibility traps: places where a program's numbers silently fail to repeat between runs,
or repeat where they should not (the same augmentation every epoch).

A trap is a registry entry like a patch (a module in ``patches/`` with a gate, an ``install``
through the journal and a canary) that also declares ``TRAP``: what ``tf-patches repro`` reads
from it (its plain-words explanation and its fix, declared once). Its detector calls
:func:`warn` where the trap springs, at trace or iterator creation, never per element: one
:class:`~tf_patches.core.errors.ReproducibilityWarning` per trap and user line, attributed to
that line (so Python's own display shows it there), and one event recorded in this process
(:func:`events`) and, under ``tf-patches repro``, appended to this process's evidence file
(``$TF_PATCHES_REPRO_DIR/traps-<pid>.jsonl``), which ``repro`` reads for every process of the run.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import warnings
from collections import namedtuple
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple

from .errors import ReproducibilityWarning, logger
from .records import Record
from .settings import FixOptions
from .signature import Site

REPRO_DIR_VARIABLE = "TF_PATCHES_REPRO_DIR"  # set by `tf-patches repro` for every process of a run
EVENTS_FILE = "traps-{pid}.jsonl"
_MAX_EVENTS = 1_000  # per process: a trap springing at every trace of a long job must not grow memory


class Trap(Record, FixOptions):
    """One trap, as ``repro``, the report and the warning describe it. (A Record: a frozen
    dataclass's behaviour, ``options`` compared but not hashed, issue 38.)"""

    __slots__ = _fields = _compared = _shown = __match_args__ = (
        "explanation", "fix", "options", "too_repeatable", "patch")
    _hashed = ("explanation", "fix", "too_repeatable", "patch")  # a mapping has no hash
    explanation: str  # plain words, singular: what happens to the user's numbers
    fix: str  # what to do about it, in the user's code (the mode that fixes it, if any)
    # apply_all() keywords of the fix tf-patches can apply ({}: a code change only, or none needed);
    # its `tf-patches run` flags and apply_all() arguments are derived from them.
    options: Mapping[str, Any]
    # True where the trap makes runs repeat more than they should (the same augmentation every
    # epoch): repro names it as a warning even when two runs are identical.
    too_repeatable: bool
    patch: str  # registry name: the registry fills it in

    def __init__(self, explanation: str, fix: str, options: Optional[Mapping[str, Any]] = None,
                 too_repeatable: bool = False, patch: str = "") -> None:
        self._assign(explanation, fix, {} if options is None else options, too_repeatable, patch)


# A collections.namedtuple: typing.NamedTuple compiles each field's annotation under `from
# __future__ import annotations` (≈60 µs a class at apply_all, issue 38).
class Event(namedtuple("Event", ("trap", "where", "function", "message", "time", "pid"))):
    """One trap sprung at one user line, as recorded: ``trap``, ``where`` ("path:line" of the
    user's code, or "" when no user frame was found), ``function``, ``message``, ``time``, ``pid``."""

    __slots__ = ()

    def to_dict(self) -> Dict[str, Any]:
        return self._asdict()


_lock = threading.Lock()
_seen: Set[Tuple[str, Any]] = set()
_events: List[Event] = []
_locate: Optional[Callable[[Any], Optional[Site]]] = None


def user_site(frame: Any = None) -> Optional[Site]:
    """The user's (path, line, function) behind ``frame`` (default: the caller's), AutoGraph's
    generated lines mapped back to the user's source; None where no user frame is on the stack."""
    global _locate
    if _locate is None:
        from .sites import locator

        _locate = locator()
    try:
        return _locate(frame if frame is not None else sys._getframe(1))
    except Exception:  # a frame walk must never break the user's trace
        return None


def warn(trap: str, message: str, *, site: Optional[Site] = None, key: Any = None) -> bool:
    """Say once per ``trap`` and user line (or ``key``) that the trap sprang: a
    ``ReproducibilityWarning`` attributed to the user's line, and an event recorded. ``site``
    defaults to the user's frame behind the caller. Returns True if this call warned."""
    if site is None:
        site = user_site(sys._getframe(1))
    where = f"{site[0]}:{site[1]}" if site else ""
    dedup = (trap, key if key is not None else where)
    with _lock:
        if dedup in _seen:
            return False
        _seen.add(dedup)
    text = f"tf-patches: {trap}: {message}" + (f" ({where})" if where else "")
    event = Event(trap, where, site[2] if site else "", message, time.time(), os.getpid())
    with _lock:
        if len(_events) < _MAX_EVENTS:
            _events.append(event)
    _write_event(event)
    try:
        if site:
            # Attributed to the user's line: Python's display shows that line, and filters
            # keyed on the user's module apply.
            warnings.warn_explicit(text, ReproducibilityWarning, site[0], site[1],
                                   module=_module_name(site[0]))
        else:
            warnings.warn(text, ReproducibilityWarning, stacklevel=2)
    except ReproducibilityWarning:
        raise  # turned into an error by the user's own filter (-W error): theirs to see
    except Exception as exc:  # a broken warnings hook must not break the trace
        logger.warning("tf-patches: %s (and showing it failed: %s)", text, exc)
    return True


def events() -> Tuple[Event, ...]:
    """The traps sprung in this process so far, oldest first."""
    with _lock:
        return tuple(_events)


def forget() -> None:
    """Forget what was warned about (tests; a trap warns again at the same line)."""
    with _lock:
        _seen.clear()
        _events.clear()


def _write_event(event: Event) -> None:
    directory = os.environ.get(REPRO_DIR_VARIABLE, "").strip()
    if not directory:
        return
    import json

    line = json.dumps(event.to_dict()) + "\n"
    try:
        # One write of one line with O_APPEND: lines of threads and forks do not interleave.
        fd = os.open(os.path.join(directory, EVENTS_FILE.format(pid=os.getpid())),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        logger.warning("tf-patches: could not record a trap for repro in %s: %s", directory, exc)


def _module_name(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0] or "<unknown>"



# AutoGraph converts any non-TF function a traced function calls, into a generated file whose
# lines map back to this module: its "user frame" would be traps.py. TF's own mark for code it must
# call unconverted (autograph_artifact) keeps warn() as it is, so the user's line is found.
warn.autograph_info__ = frozenset()  # type: ignore[attr-defined]
