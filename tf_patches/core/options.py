"""Options: keyword arguments of ``apply_all`` with a ``TF_PATCHES_*`` environment variable each,
and a ``tf-patches run`` flag each.

One converter per option validates all three. Keywords win over variables, variables over
defaults; blank text (``""``, or only spaces) means unset wherever it comes from. A bad keyword
raises (the caller can fix their code); a bad variable warns once and is ignored (a typo in a
job's environment must not stop the job), quoting no more than a short prefix of the value; a
bad flag stops ``tf-patches run`` before the command starts.
"""

from __future__ import annotations

import numbers
import operator
import os
import sys
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from .errors import ConfigWarning, brief, logger, warn_in_passing
from .records import Record

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_PACKAGE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "")
NONE = "none"  # as a patch-name list: no patch (TF_PATCHES_ONLY=none turns tf-patches off)
_QUOTED = 80  # a bad value is quoted up to this many characters (errors.brief)
_MAX_PROBLEM = 600  # what is wrong with it, at most (the valid patch names fit)


class Option(Record):
    """One setting. ``convert`` turns a keyword value, a variable's text or a flag's text into the
    value, or raises ``ValueError``/``TypeError`` whose message names the valid values; it never
    sees blank text, which means unset. (A Record: a frozen dataclass's behaviour, issue 38.)"""

    __slots__ = _fields = _compared = _shown = __match_args__ = ("name", "env_var", "convert", "default", "help")
    name: str
    env_var: str
    convert: Callable[[Any], Any]
    default: Any
    help: str

    def __init__(self, name: str, env_var: str, convert: Callable[[Any], Any], default: Any, help: str) -> None:
        self._assign(name, env_var, convert, default, help)


def run_flag(name: str) -> str:
    """The ``tf-patches run`` flag of the ``apply_all`` keyword ``name``: ``--graph-growth-guard``."""
    return "--" + name.replace("_", "-")


def unset(value: Any) -> bool:
    """None or blank text: an empty variable (``VAR=``) is an unset one, as shells and Docker mean it."""
    return value is None or (isinstance(value, str) and not value.strip())


def flag(value: Any) -> bool:
    """True/False, or the text of a variable: 1/true/yes/on, 0/false/no/off (any case)."""
    if isinstance(value, bool):
        return value
    expected = f"expected a boolean: True/False or one of {'/'.join(_TRUE)}, {'/'.join(_FALSE)}"
    if not isinstance(value, str):
        raise TypeError(f"{expected}, got {brief(value)}")
    if value.strip().lower() not in _TRUE + _FALSE:
        raise ValueError(f"{expected}, got {brief(value)}")
    return value.strip().lower() in _TRUE


def choice(*values: str) -> Callable[[Any], str]:
    """One of ``values``, read in any case with spaces around ignored (``" EXACT "`` is
    ``"exact"``), as :func:`flag` reads its words: the documented contract (README, apply_all)."""

    def convert(value: Any) -> str:
        expected = f"expected one of {', '.join(values)}"
        if not isinstance(value, str):
            raise TypeError(f"{expected}, got {brief(value)}")
        if value.strip().lower() not in values:
            raise ValueError(f"{expected}, got {brief(value)}")
        return value.strip().lower()

    return convert


def whole_number(maximum: int) -> Callable[[Any], int]:
    """0 to ``maximum``: an ``int`` (NumPy's integers too; not ``bool``) or ASCII decimal digits
    (leading zeros allowed; no sign, ``0x``, ``_`` or other scripts' digits, which ``int()`` takes)."""

    def convert(value: Any) -> int:
        expected = f"expected a whole number from 0 to {maximum}"
        if isinstance(value, str):
            text = value.strip()
            if not (text.isascii() and text.isdigit()):
                raise ValueError(f"{expected} in decimal digits, got {brief(value)}")
            digits = text.lstrip("0") or "0"
            # Compare lengths first: int() refuses more than 4,300 digits.
            number = int(digits) if len(digits) <= len(str(maximum)) else maximum + 1
        elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
            number = operator.index(value)  # NumPy's bool_ is no Integral (older NumPy indexes it)
        else:
            raise TypeError(f"{expected}, got {brief(value)}")
        if not 0 <= number <= maximum:
            raise ValueError(f"{expected}, got {brief(value)}")
        return number

    return convert


def names(valid: Sequence[str]) -> Callable[[Any], Tuple[str, ...]]:
    """Patch names: comma-separated text or an iterable of strings; ``"none"`` (or ``[]``) names
    none. ``None`` or ``NONE`` in text is refused: it reads as Python's ``only=None``, which
    means every patch, where ``none`` means no patch at all."""

    def convert(value: Any) -> Tuple[str, ...]:
        if isinstance(value, str):
            items = [part.strip() for part in value.split(",") if part.strip()]
            if items == [NONE]:
                return ()
            if [item.lower() for item in items] == [NONE]:
                raise ValueError(f"{brief(value)} is ambiguous: {NONE} (in lower case) applies no patch, "
                                 f"while only=None applies them all (leave the setting unset for that)")
            if not items:  # "," would otherwise turn every patch off unseen
                raise ValueError(f"{brief(value)} names no patch; {NONE} names none on purpose")
        elif isinstance(value, Iterable) and not isinstance(value, (bytes, Mapping)):
            items = list(value)
            if not all(isinstance(item, str) for item in items):
                raise TypeError(f"patch names must be strings, got {brief(value)}")
        else:
            raise TypeError(f"expected patch names (a string or a list of strings), got {brief(value)}")
        unknown = [item for item in items if item not in valid]
        if unknown:
            raise ValueError(f"unknown patch name(s) {brief(', '.join(unknown))}; valid names: "
                             f"{', '.join(valid)}, or {NONE} for no patch")
        return tuple(items)

    return convert


def core_options(patch_names: Sequence[str]) -> Tuple[Option, ...]:
    return (
        Option("only", "TF_PATCHES_ONLY", names(patch_names), None,
               f"Comma-separated patch names: apply only these ({NONE}: apply none, tf-patches off). "
               "Default: every patch that applies here (tf-patches report lists them)."),
        Option("exclude", "TF_PATCHES_EXCLUDE", names(patch_names), None,
               "Comma-separated patch names: never apply these."),
        Option("strict", "TF_PATCHES_STRICT", flag, False,
               "1: raise an error (TfPatchesError) when a patch fails, or when a patch named in the "
               "only option cannot apply. Default: off (a warning, and the program goes on)."),
    )


_warned: Set[Tuple[str, Any]] = set()
_DEFAULT: Any = object()  # from_environment's default: the option's own


def warn_config(variable: str, value: Any, problem: str) -> None:
    """Warn once per process about a bad setting, naming what is valid; the program goes on.
    The value is quoted briefly, here and where ``problem`` repeats it (``File name too long:
    '<the whole value>'``)."""
    key = (variable, value if isinstance(value, (str, bytes)) else brief(value))  # a list is unhashable
    if key in _warned:
        return
    _warned.add(key)
    message = f"tf-patches: ignoring {variable}={brief(value)}: {_bounded(problem, value)}"
    logger.info(message)  # the warning below is what users see; logging would repeat it
    warn_in_passing(message, ConfigWarning, _caller_level())  # the default is used, as promised


def _bounded(problem: str, value: Any) -> str:
    if isinstance(value, (str, bytes)) and len(value) > _QUOTED:
        text = value if isinstance(value, str) else value.decode("utf-8", "replace")
        problem = problem.replace(repr(value), brief(value)).replace(text, brief(value)[1:-1])
    return problem if len(problem) <= _MAX_PROBLEM else problem[:_MAX_PROBLEM] + "..."


def _caller_level() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside tf-patches (the
    user's ``apply_all()`` line), counted from the function calling this one."""
    frame, level = sys._getframe(2), 2
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level


def from_environment(option: Option, environ: Optional[Mapping[str, str]] = None, default: Any = _DEFAULT) -> Any:
    """The value of ``option``'s variable: ``default`` (the option's own unless given) when it is
    unset or blank, and when it is bad, after one :class:`ConfigWarning`."""
    default = option.default if default is _DEFAULT else default
    raw = (os.environ if environ is None else environ).get(option.env_var)
    if unset(raw):
        return default
    try:
        return option.convert(raw)
    except (TypeError, ValueError) as exc:
        warn_config(option.env_var, raw, str(exc))
        return default


def unexpected(names: Iterable[str], valid: Iterable[str]) -> TypeError:
    """The error for keywords no ``apply_all`` takes (Settings and Ray's runtime_env say the same)."""
    return TypeError(f"apply_all() got unexpected keyword(s) {', '.join(names)}; valid: {', '.join(sorted(valid))}")


def resolve(options: Iterable[Option], given: Mapping[str, Any],
            environ: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """Merge keywords, environment variables and defaults. Unknown keywords raise ``TypeError``."""
    options = tuple(options)
    known = {option.name for option in options}
    unknown = sorted(set(given) - known)
    if unknown:
        raise unexpected(unknown, known)
    values: Dict[str, Any] = {}
    for option in options:
        if unset(given.get(option.name)):
            values[option.name] = from_environment(option, environ)
            continue
        try:
            values[option.name] = option.convert(given[option.name])
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{option.name}: {exc}") from None
    return values
