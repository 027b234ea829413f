"""Record: a frozen value class that lists its fields and gets what ``@dataclass(frozen=True)``
would write for it (``__repr__``, ``__eq__``, ``__hash__``, no assignment, pickling), without the
0.5–1 ms a dataclass takes to define: it compiles each method when its module loads, and
``apply_all()`` after ``import tensorflow`` loaded four of them (issue 38). Standard library only.

A subclass sets ``__slots__`` and ``_fields`` (in ``__init__``'s order), ``_compared`` (what
``==`` and ``hash`` read; a dataclass's ``compare=True`` fields), ``_hashed`` where ``hash`` reads
fewer (a dataclass's ``hash=False`` fields left out: a mapping has no hash) and ``_shown`` (what
``repr`` shows), and its ``__init__`` calls :meth:`_assign`. ``_replace`` is ``dataclasses.replace``.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple


class Record:
    __slots__ = ()
    _fields: Tuple[str, ...] = ()
    _compared: Tuple[str, ...] = ()
    _shown: Tuple[str, ...] = ()
    _hashed: Optional[Tuple[str, ...]] = None  # None: those compared

    def _assign(self, *values: Any) -> None:
        for name, value in zip(self._fields, values):
            object.__setattr__(self, name, value)

    def _replace(self, **changes: Any) -> Any:
        """A copy with ``changes`` (through ``__init__``, so its checks run again)."""
        return type(self)(**{name: changes.pop(name, getattr(self, name)) for name in self._fields}, **changes)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._shown)
        return f"{type(self).__qualname__}({shown})"

    def __eq__(self, other: Any) -> Any:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return tuple(getattr(self, name) for name in self._compared) == tuple(
            getattr(other, name) for name in self._compared)

    def __hash__(self) -> int:
        hashed = self._compared if self._hashed is None else self._hashed
        return hash(tuple(getattr(self, name) for name in hashed))

    def __setattr__(self, name: str, value: Any) -> None:
        from dataclasses import FrozenInstanceError  # only when someone tries: what a dataclass raised

        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> Tuple[Any, ...]:
        # Slots and no __setattr__: the default protocol could not set them back.
        return type(self), tuple(getattr(self, name) for name in self._fields)
