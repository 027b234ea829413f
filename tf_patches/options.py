"""Options: keyword arguments of ``apply_all`` with a ``TF_PATCHES_*`` environment variable each.

Keywords win over variables, variables over defaults. A bad keyword raises (the caller can fix
their code); a bad variable warns once and is ignored (a typo in a job's environment must not
stop the job).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Sequence, Set, Tuple

from .errors import ConfigWarning, logger

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


@dataclass(frozen=True)
class Option:
    """One setting. ``convert`` turns a keyword value or a variable's text into the value, or
    raises ``ValueError``/``TypeError`` whose message names the valid values."""

    name: str
    env_var: str
    convert: Callable[[Any], Any]
    default: Any
    help: str


def flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"expected a boolean ({'/'.join(_TRUE)} or {'/'.join(_FALSE[:-1])}), got {value!r}")


def choice(*values: str) -> Callable[[Any], str]:
    def convert(value: Any) -> str:
        if not isinstance(value, str):
            raise TypeError(f"expected one of {', '.join(values)}, got {value!r}")
        if value.strip().lower() not in values:
            raise ValueError(f"expected one of {', '.join(values)}, got {value!r}")
        return value.strip().lower()

    return convert


def integer(value: Any) -> Optional[int]:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip(), 0)
        except ValueError:
            pass
    raise ValueError(f"expected an integer, got {value!r}")


def names(valid: Sequence[str]) -> Callable[[Any], Optional[Tuple[str, ...]]]:
    """Patch names, as a comma-separated string or an iterable of strings."""

    def convert(value: Any) -> Optional[Tuple[str, ...]]:
        if value is None:
            return None
        if isinstance(value, str):
            items = [part.strip() for part in value.split(",") if part.strip()]
        elif isinstance(value, Iterable) and not isinstance(value, (bytes, Mapping)):
            items = list(value)
            if not all(isinstance(item, str) for item in items):
                raise TypeError(f"patch names must be strings, got {value!r}")
        else:
            raise TypeError(f"expected patch names (a string or a list of strings), got {value!r}")
        unknown = [item for item in items if item not in valid]
        if unknown:
            raise ValueError(f"unknown patch name(s) {', '.join(unknown)}; valid names: {', '.join(valid)}")
        return tuple(items)

    return convert


def core_options(patch_names: Sequence[str]) -> Tuple[Option, ...]:
    return (
        Option("only", "TF_PATCHES_ONLY", names(patch_names), None,
               "Comma-separated patch names: apply only these."),
        Option("exclude", "TF_PATCHES_EXCLUDE", names(patch_names), None,
               "Comma-separated patch names: never apply these."),
        Option("strict", "TF_PATCHES_STRICT", flag, False,
               "1: raise TfPatchesError when a patch fails or a patch named in `only` cannot apply."),
    )


_warned: Set[Tuple[str, str]] = set()


def warn_config(variable: str, value: str, problem: str) -> None:
    """Warn once per process about a bad setting, naming what is valid; the program goes on."""
    if (variable, value) in _warned:
        return
    _warned.add((variable, value))
    message = f"tf-patches: ignoring {variable}={value!r}: {problem}"
    logger.info(message)  # the warning below is what users see; logging would repeat it
    warnings.warn(message, ConfigWarning, stacklevel=3)


def resolve(options: Iterable[Option], given: Mapping[str, Any],
            environ: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """Merge keywords, environment variables and defaults. Unknown keywords raise ``TypeError``."""
    environ = os.environ if environ is None else environ
    options = tuple(options)
    known = {option.name for option in options}
    unknown = sorted(set(given) - known)
    if unknown:
        raise TypeError(
            f"apply_all() got unexpected keyword(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}"
        )
    values: Dict[str, Any] = {}
    for option in options:
        if given.get(option.name) is not None:
            try:
                values[option.name] = option.convert(given[option.name])
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"{option.name}: {exc}") from None
            continue
        values[option.name] = option.default
        raw = environ.get(option.env_var)
        if raw is None:
            continue
        try:
            values[option.name] = option.convert(raw)
        except (TypeError, ValueError) as exc:
            warn_config(option.env_var, raw, str(exc))
    return values
