"""What one ``tf-patches repro`` is asked to do, typed and checked once: from the command line
(:meth:`Request.from_args`, argparse's edge) or from :func:`tf_patches.repro.command.repro`'s
keywords (the constructor, no argparse). The runs' patch options are a
:class:`~tf_patches.core.settings.Settings` beside it."""

from __future__ import annotations

import argparse
import math
import os
from typing import Any, List, Optional, Sequence, Tuple

from .experiments import DEFAULT_LIMIT

FIELDS = ("runs", "compare", "compare_stderr", "ignore", "timeout", "keep", "against", "experiments", "verify",
          "locate", "locate_limit", "ray", "record", "json", "output")


def whole(value: Any, minimum: int, what: str, why: str) -> int:
    """A whole number of ``what`` no smaller than ``minimum``, from a number or its text."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"expected a whole number of {what}, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"expected a whole number of {what}, got {value!r}") from None
    if number < minimum:
        raise ValueError(f"{why}, got {number}")
    return number


def check_runs(value: Any) -> int:
    return whole(value, 2, "runs", "at least 2 runs are needed to compare")


def check_experiments(value: Any) -> int:
    return whole(value, 0, "experiments", "expected 0 or more experiments")


def check_locate_limit(value: Any) -> int:
    return whole(value, 1, "ops", "expected 1 or more ops")


def check_seconds(value: Any) -> float:
    """A positive, finite number of seconds, from a number or its text."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"expected a number of seconds, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"expected a number of seconds, got {value!r}") from None
    if not number > 0 or number == math.inf:
        raise ValueError(f"expected a positive number of seconds, got {value!r}")
    return number


def _texts(name: str, values: Sequence[Any]) -> Tuple[str, ...]:
    if isinstance(values, (str, bytes)) or not all(isinstance(value, (str, os.PathLike)) for value in values):
        raise TypeError(f"{name} must be a list of strings, got {values!r}")
    return tuple(os.fspath(value) for value in values)


def _path(name: str, value: Any) -> Optional[str]:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path, got {value!r}")
    return os.fspath(value)


class Request:
    """The options of one repro, each checked as its command-line flag is (bad values: ValueError
    or TypeError before any run)."""

    __slots__ = FIELDS

    def __init__(self, *, runs: int = 2, compare: Sequence[str] = (), compare_stderr: bool = False,
                 ignore: Sequence[str] = (), timeout: Optional[float] = None, keep: Optional[str] = None,
                 against: Optional[str] = None, experiments: int = DEFAULT_LIMIT, verify: bool = False,
                 locate: bool = False, locate_limit: Optional[int] = None, ray: Optional[str] = None,
                 record: Optional[str] = None, json: bool = False, output: Optional[str] = None) -> None:
        self.runs = check_runs(runs)
        self.compare: List[str] = list(_texts("compare", compare))
        self.ignore: List[str] = list(_texts("ignore", ignore))
        self.timeout = None if timeout is None else check_seconds(timeout)
        self.experiments = check_experiments(experiments)
        self.locate_limit = None if locate_limit is None else check_locate_limit(locate_limit)
        self.keep, self.against, self.record, self.output = (
            _path(name, value) for name, value in (("keep", keep), ("against", against), ("record", record),
                                                   ("output", output)))
        self.ray = None if ray is None else str(ray)
        self.compare_stderr, self.verify, self.locate, self.json = (
            bool(compare_stderr), bool(verify), bool(locate), bool(json))

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Request":
        """From ``tf-patches repro``'s command line (its flags already checked by the same rules)."""
        return cls(**{name: getattr(args, name) for name in FIELDS})

    def __repr__(self) -> str:
        return "Request(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in FIELDS) + ")"

