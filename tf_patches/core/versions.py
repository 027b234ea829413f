"""Version strings, and the specifiers gates write, read without ``packaging`` where they can be.

A gate compares releases: ``2.16.0rc0`` carries 2.16's code, ``1.15.5+nv22.12`` is 1.15.5 (NVIDIA's
builds are told apart by the local tag). So a version is read as its :class:`Release`, and a
specifier (``">=2.6,!=2.15.*"``) names releases only, matched here by PEP 440's rules for releases.

Why not ``packaging`` alone: importing ``packaging.specifiers`` and building its specifiers cost
≈3–5 ms of ``apply_all()`` (a large regular expression compiled at import), more than the gates
themselves. The plain forms TF's builds carry (``2.21.0``, ``1.15.5+nv22.12``) are read here;
anything else (``2.22.0.dev20260905``, ``v2.0``, epochs) by ``packaging.version``, so every
version packaging accepts is read as packaging reads it (``tests/test_gate.py`` compares both).
"""

from __future__ import annotations

from operator import eq, ge, gt, le, lt, ne

_OPERATORS = ("===", "~=", "==", "!=", "<=", ">=", "<", ">")  # longest first
_COMPARISONS = {"==": eq, "!=": ne, "<": lt, "<=": le, ">": gt, ">=": ge}


class Release:
    """A release number: ``2.16`` equals ``2.16.0`` (PEP 440 pads with zeros), ordered by
    epoch, then release."""

    __slots__ = ("release", "epoch", "_key")

    def __init__(self, release: tuple, epoch: int = 0) -> None:
        self.release = release
        self.epoch = epoch
        key = list(release)
        while len(key) > 1 and key[-1] == 0:
            key.pop()
        self._key = (epoch, tuple(key))

    @property
    def major(self) -> int:
        return self.release[0]

    @property
    def minor(self) -> int:
        return self.release[1] if len(self.release) > 1 else 0

    @property
    def micro(self) -> int:
        return self.release[2] if len(self.release) > 2 else 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Release) and self._key == other._key

    def __lt__(self, other: "Release") -> bool:
        return self._key < other._key

    def __le__(self, other: "Release") -> bool:
        return self._key <= other._key

    def __gt__(self, other: "Release") -> bool:
        return self._key > other._key

    def __ge__(self, other: "Release") -> bool:
        return self._key >= other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __str__(self) -> str:
        text = ".".join(map(str, self.release))
        return f"{self.epoch}!{text}" if self.epoch else text

    def __repr__(self) -> str:
        return f"<Release {self}>"


def release(text: str) -> Release:
    """A release written as numbers (``"2.8"``), for constants; raises ``ValueError`` otherwise."""
    parts = _numbers(text)
    if parts is None:
        raise ValueError(f"not a release number: {text!r}")
    return Release(parts)


def parse_version(text: object) -> "Release | None":
    """Return the release a version string belongs to, or None when it cannot be parsed."""
    parsed = _read(text)
    return None if parsed is None else parsed[0]


def local_tag(text: object) -> "str | None":
    """Return the local tag of a version string (``nv22.12`` for ``1.15.5+nv22.12``), if any."""
    parsed = _read(text)
    return None if parsed is None else parsed[1]


def matches(version: Release, specifiers: str) -> bool:
    """Whether a release satisfies every comma-separated specifier (``""``: any release)."""
    return all(_matches(version, *clause) for clause in specifier_clauses(specifiers))


def specifier_clauses(specifiers: str) -> list:
    """``">=2.6,!=2.15.*"`` as ``[(">=", (2, 6), False), ("!=", (2, 15), True)]``; raises
    ``ValueError`` for what is not a release specifier (``===``, pre-releases, no operator)."""
    clauses = []
    for clause in specifiers.split(","):
        clause = clause.strip()
        if not clause:
            continue  # "" (or a stray comma, as packaging reads it): no condition
        operator = next((op for op in _OPERATORS if clause.startswith(op)), None)
        text = clause[len(operator):].strip() if operator else ""
        wildcard = text.endswith(".*") and operator in ("==", "!=")
        numbers = _numbers(text[:-2] if wildcard else text)
        if operator is None or operator == "===" or numbers is None or (operator == "~=" and len(numbers) < 2):
            raise ValueError(f"not a release specifier: {clause!r} (in {specifiers!r}); "
                             "write one of ==, !=, <, <=, >, >=, ~= and a release such as 2.16 or 2.15.*")
        clauses.append((operator, numbers, wildcard))
    return clauses


def _matches(version: Release, operator: str, numbers: tuple, wildcard: bool) -> bool:
    if version.epoch:  # a specifier without an epoch names epoch 0
        return operator in ("!=", ">", ">=")
    if wildcard:  # ==2.15.*: the release padded or cut to that many numbers
        prefix = (version.release + (0,) * len(numbers))[:len(numbers)] == numbers
        return prefix if operator == "==" else not prefix
    other = Release(numbers)
    if operator == "~=":  # ~=2.4.1 is >=2.4.1 and ==2.4.*
        return version >= other and _matches(version, "==", numbers[:-1], True)
    return _COMPARISONS[operator](version, other)


def _numbers(text: str) -> "tuple | None":
    parts = text.split(".")
    if all(part.isdigit() and part.isascii() for part in parts):
        return tuple(int(part) for part in parts)
    return None


def _read(text: object) -> "tuple | None":
    """(release, local tag) of a version string, or None."""
    if not isinstance(text, str):
        return None
    base, plus, local = text.strip().partition("+")
    numbers = _numbers(base) if len(text) < 4300 else None  # Python's int limit: packaging's answer
    if numbers is not None:
        if not plus:
            return Release(numbers), None
        segments = local.replace("-", ".").replace("_", ".").split(".")
        if all(segment.isalnum() and segment.isascii() for segment in segments):
            return Release(numbers), ".".join(str(int(s)) if s.isdigit() else s.lower() for s in segments)
    return _read_with_packaging(text)


def _read_with_packaging(text: str) -> "tuple | None":
    from packaging.version import Version  # pre-, post- and dev releases, epochs, a leading v

    try:
        version = Version(text.strip())
    except ValueError:  # InvalidVersion, or a number past Python's 4,300-digit int limit
        return None
    return Release(version.release, version.epoch), version.local
