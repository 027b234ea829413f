"""The report: one row per registered patch saying what happened to it and why."""

from __future__ import annotations

from collections import namedtuple
from functools import partial
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from .environment import Environment
from .records import Record

APPLIED = "applied"
PENDING = "pending"
SKIPPED = "skipped"
FAILED = "failed"
ADVISED = "advised"  # an advisory whose gate matched: nothing patched, the user is told what to do


# A collections.namedtuple: typing.NamedTuple compiles each field's annotation under `from
# __future__ import annotations` (≈60 µs a class at apply_all, issue 38).
class Row(namedtuple("Row", ("name", "title", "status", "reason", "issue_url"))):
    """One patch's line of the report: its status and why (``name``, ``title``, ``status``,
    ``reason``, ``issue_url``, all str)."""

    __slots__ = ()


_UNREAD: Any = object()


class Report(Record):
    """A snapshot; ``tf_patches.report()`` makes a new one each time it is asked. (A Record: a
    frozen dataclass's behaviour, issue 38; ``read_fingerprint`` is neither shown nor compared.)"""

    __slots__ = ("rows", "environment", "read_fingerprint", "_fingerprint")
    _fields = ("rows", "environment", "read_fingerprint")
    _compared = _shown = __match_args__ = ("rows", "environment")
    rows: Tuple[Row, ...]
    environment: Optional[Environment]
    # Reads the fingerprint (core.fingerprint). Called at most once, on first use of `fingerprint`:
    # it reads installed packages and TF's settings, which apply_all() need not pay for.
    read_fingerprint: Optional[Callable[[], Dict[str, Any]]]

    def __init__(self, rows: Tuple[Row, ...], environment: Optional[Environment] = None,
                 read_fingerprint: Optional[Callable[[], Dict[str, Any]]] = None) -> None:
        self._assign(rows, environment, read_fingerprint)
        object.__setattr__(self, "_fingerprint", _UNREAD)

    @property
    def fingerprint(self) -> Optional[Dict[str, Any]]:
        """What decides the numbers besides code and seeds; for ``apply_all()``'s report, read when
        first asked (``tf_patches.report()`` reads it at once)."""
        if self._fingerprint is _UNREAD:
            object.__setattr__(self, "_fingerprint",
                               self.read_fingerprint() if self.read_fingerprint is not None else None)
        return self._fingerprint

    def __reduce__(self) -> Tuple[Any, ...]:
        # Pickled (a report returned from map_isolated or a Ray task) with the fingerprint read
        # here, in the process the report describes: the reader does not travel.
        fingerprint = self.fingerprint
        return (Report, (self.rows, self.environment, None if fingerprint is None else partial(dict, fingerprint)))

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, name: str) -> Row:
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(f"no patch named {name!r} in the report; names: {', '.join(r.name for r in self.rows)}")

    def status(self, name: str) -> str:
        return self[name].status

    def to_dict(self) -> Dict[str, Any]:
        return {
            "environment": self.environment.to_dict() if self.environment else None,
            "patches": [row._asdict() for row in self.rows],
            "fingerprint": self.fingerprint,
        }

    def to_json(self, indent: Optional[int] = 2) -> str:
        import json  # here: apply_all() returns a report it does not serialise

        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    def __str__(self) -> str:
        header = ("patch", "status", "reason")
        body = [(row.name, row.status, row.reason) for row in self.rows]
        widths = [max(len(line[i]) for line in [header, *body]) for i in range(2)]
        lines = []
        if self.environment is not None:
            lines.append(self.environment.describe())
            lines += [f"note: {note}" for note in self.environment.notes]
        for line in [header, *body]:
            lines.append(f"{line[0]:<{widths[0]}}  {line[1]:<{widths[1]}}  {line[2]}")
        if self.fingerprint:
            from .fingerprint import describe

            lines.append("fingerprint (what decides the numbers besides code and seeds):")
            lines.append(describe(self.fingerprint))
        return "\n".join(lines)
