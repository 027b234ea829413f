"""Settings: the one form patch options take inside tf-patches.

A :class:`Settings` holds the ``apply_all`` options that were *given* (a keyword, a variable, a
flag), each already converted by its :class:`~.options.Option` (so it is validated once, where
it is made), plus the two ``tf-patches run`` settings that no ``apply_all()`` can apply because
they act at process start: ``malloc`` (``--malloc``) and ``hash_seed`` (``--hash-seed``,
``PYTHONHASHSEED``). It is frozen and ordered (the order in which the values were given, which
is the order ``to_flags`` prints them in).

Every other form is derived from it at the edge that needs it: ``to_environ`` (the
``TF_PATCHES_*`` variables a command, a Ray worker or a test's run reads), ``to_flags`` (the
``tf-patches run`` command line a report shows), ``to_code`` (the ``apply_all()`` arguments a
report shows). ``merged`` unites two (the first value of an option wins): ``--verify``'s fixes,
an experiment's knob over the user's options. argparse stays in the command line
(:mod:`tf_patches.session.arguments` builds the flags; :meth:`Settings.from_args` reads them).

Not imported by ``import tf_patches``; the registry (every patch's options) is loaded when a
Settings is first made.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, Iterator, Mapping, Optional, Tuple

from .options import NONE, Option, from_environment, run_flag, unexpected, unset

TYPE_CHECKING = False  # typing.TYPE_CHECKING, which type checkers read alike
if TYPE_CHECKING:
    import argparse

ALLOCATORS = ("jemalloc", "tcmalloc")  # --malloc: what session.allocator knows how to find
HASH_SEED_VARIABLE = "PYTHONHASHSEED"
MAX_HASH_SEED = 4294967295  # Python's own limit for PYTHONHASHSEED
_RUN_FIELDS = ("hash_seed", "malloc")  # tf-patches run's own, in the order its flags are printed


def _malloc(value: Any) -> str:
    if value not in ALLOCATORS:
        raise (ValueError if isinstance(value, str) else TypeError)(
            f"expected one of {', '.join(ALLOCATORS)}, got {value!r}")
    return value


def hash_seed(value: Any) -> Any:
    """What Python accepts in PYTHONHASHSEED: 0 to 4294967295 (text or an int), or ``"random"``."""
    text = value.strip() if isinstance(value, str) else value
    if text == "random":
        return text
    # Length first: int() refuses more than 4,300 digits.
    if isinstance(text, str) and text.isascii() and text.isdigit() and len(text.lstrip("0")) <= 10 \
            and int(text) <= MAX_HASH_SEED:
        return int(text)
    if isinstance(text, int) and not isinstance(text, bool) and 0 <= text <= MAX_HASH_SEED:
        return text
    raise (ValueError if isinstance(value, (str, int)) else TypeError)(
        f"expected a whole number from 0 to {MAX_HASH_SEED} (or random), got {value!r}")


_RUN_CONVERTERS = {"hash_seed": hash_seed, "malloc": _malloc}


def _options() -> Dict[str, Option]:
    from .registry import all_options  # the patch modules load with the first Settings made

    return {option.name: option for option in all_options()}


def _text(value: Any) -> str:
    """A converted value as its variable's or flag's text, which the option's converter reads back."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return ",".join(value) if value else NONE
    return str(value)


class Settings:
    """``apply_all`` options (and ``malloc``, ``hash_seed``), validated, frozen and ordered.

    ``Settings(deterministic=True, seed=3, malloc="tcmalloc")`` checks as
    :meth:`from_kwargs` does, and takes ``malloc`` and ``hash_seed`` too. Reading an option
    as an attribute (``settings.seed``) gives its value, or its default where it was not given;
    ``settings.get(name)`` gives None for one not given; ``name in settings`` says whether it was.
    """

    __slots__ = ("_items",)
    _items: Tuple[Tuple[str, Any], ...]

    def __init__(self, **options: Any) -> None:
        object.__setattr__(self, "_items", Settings._checked(options, _RUN_FIELDS)._items)

    @classmethod
    def _of(cls, items: Iterable[Tuple[str, Any]]) -> "Settings":
        made = object.__new__(cls)
        object.__setattr__(made, "_items", tuple(items))
        return made

    # -- made from -----------------------------------------------------------------------------
    @classmethod
    def from_kwargs(cls, options: Optional[Mapping[str, Any]] = None, **more: Any) -> "Settings":
        """From ``apply_all`` keywords, checked as ``apply_all`` checks them (the same messages):
        an unknown name is a ``TypeError``, a bad value a ``ValueError`` or ``TypeError`` naming
        the option. None or blank text is not given. (``Settings(...)`` takes ``malloc`` and
        ``hash_seed`` too.)"""
        return cls._checked({**(options or {}), **more}, ())

    @classmethod
    def _checked(cls, given: Mapping[str, Any], run_fields: Tuple[str, ...]) -> "Settings":
        known = _options()
        unknown = sorted(name for name in given if name not in known and name not in run_fields)
        if unknown:
            raise unexpected(unknown, [*known, *run_fields])
        items = []
        for name, value in given.items():
            if unset(value):
                continue
            convert = known[name].convert if name in known else _RUN_CONVERTERS[name]
            try:
                items.append((name, convert(value)))
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"{name}: {exc}") from None
        return cls._of(items)

    @classmethod
    def from_environ(cls, environ: Optional[Mapping[str, str]] = None) -> "Settings":
        """From the ``TF_PATCHES_*`` variables (``os.environ`` by default), as ``apply_all`` reads
        them: a bad value warns once (:class:`~tf_patches.ConfigWarning`) and is not given, so the
        default is used. ``malloc`` and ``hash_seed`` are not read: they act at process start."""
        environ = os.environ if environ is None else environ
        items = []
        for option in _options().values():
            value = from_environment(option, environ, default=_NOT_GIVEN)
            if value is not _NOT_GIVEN:
                items.append((option.name, value))
        return cls._of(items)

    @classmethod
    def from_args(cls, args: "argparse.Namespace") -> "Settings":
        """From the command line parsed with :func:`tf_patches.session.arguments.add_arguments`
        (whose flags hold converted values already), in the registry's order."""
        names = [(option.name, option.env_var) for option in _options().values()]
        names += [(name, name) for name in _RUN_FIELDS]
        return cls._of((name, getattr(args, dest)) for name, dest in names
                       if getattr(args, dest, None) is not None)

    # -- read ----------------------------------------------------------------------------------
    def get(self, name: str, default: Any = None) -> Any:
        """The value given for ``name``, else ``default``."""
        return next((value for key, value in self._items if key == name), default)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        found = self.get(name, _NOT_GIVEN)
        if found is not _NOT_GIVEN:
            return found
        if name in _RUN_CONVERTERS:
            return None
        option = _options().get(name)
        if option is None:
            raise AttributeError(f"Settings has no option {name!r}")
        return option.default

    def __contains__(self, name: object) -> bool:
        return any(key == name for key, _ in self._items)

    def __iter__(self) -> Iterator[str]:
        return (key for key, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> Tuple[Tuple[str, Any], ...]:
        return self._items

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Settings is frozen: make another (merged, from_kwargs)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Settings is frozen")

    def __eq__(self, other: object) -> bool:  # the same values, whatever order they were given in
        return isinstance(other, Settings) and dict(self._items) == dict(other._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items))

    def __repr__(self) -> str:
        run = ", ".join(f"{name}={value!r}" for name, value in self._items if name in _RUN_CONVERTERS)
        return f"Settings({', '.join(part for part in (self.to_code(), run) if part)})"

    def __reduce__(self) -> Any:  # pickles (map_isolated, Ray) as its items, made again without a check
        return (Settings._of, (self._items,))

    # -- combined ------------------------------------------------------------------------------
    def merged(self, *others: Optional["Settings"]) -> "Settings":
        """These settings, then each of ``others``' for the options not given before it (the first
        value of an option wins; None is no settings)."""
        items = dict(self._items)  # ordered: the order given, the first value kept
        for other in others:
            for name, value in other._items if other is not None else ():
                items.setdefault(name, value)
        return Settings._of(items.items())

    def without(self, *names: str) -> "Settings":
        """These settings less ``names``."""
        return Settings._of((name, value) for name, value in self._items if name not in names)

    # -- as other forms ------------------------------------------------------------------------
    def to_kwargs(self) -> Dict[str, Any]:
        """The ``apply_all`` keywords (``malloc`` and ``hash_seed`` left out: no apply_all takes them)."""
        return {name: value for name, value in self._items if name not in _RUN_CONVERTERS}

    def to_environ(self) -> Dict[str, str]:
        """The variables a process reads these from: each option's ``TF_PATCHES_*`` (False is
        ``0``, no patch is ``none``: the value survives, where a flag could not say it), and
        ``PYTHONHASHSEED`` for ``hash_seed``. ``malloc`` is no variable: it is preloaded where the
        command starts (:func:`tf_patches.session.command.environment`)."""
        known = _options()
        environ = {known[name].env_var: _text(value) for name, value in self._items if name in known}
        if self.hash_seed is not None:
            environ[HASH_SEED_VARIABLE] = str(self.hash_seed)
        return environ

    def to_flags(self) -> Tuple[str, ...]:
        """The ``tf-patches run`` flags that give these settings, for a report to show: ``--name
        VALUE``, a bare ``--name`` for True, names comma-joined (``none`` for no patch). An
        option set to False has no flag (the command line cannot turn off what is off by
        default); :meth:`to_environ` carries it."""
        flags = []
        for name, value in self._items:
            if value is False:
                continue
            flags.append(run_flag(name))
            if value is not True:
                flags.append(_text(value))
        return tuple(flags)

    def to_code(self) -> str:
        """The ``apply_all()`` arguments, as code: ``graph_growth_guard="finalize", seed=3``."""
        return ", ".join(f'{name}="{value}"' if isinstance(value, str) else
                         f"{name}={list(value)!r}" if isinstance(value, tuple) else f"{name}={value!r}"
                         for name, value in self.to_kwargs().items())


_NOT_GIVEN: Any = object()


class FixOptions:
    """What a declaration whose fix is its ``options`` (``Signature``, ``Trap``) derives from them."""

    __slots__ = ()

    @property
    def settings(self) -> Settings:
        """The fix as :class:`Settings` (what ``--verify`` merges and applies)."""
        return Settings.from_kwargs(self.options)  # type: ignore[attr-defined]

    @property
    def run_flags(self) -> Tuple[str, ...]:
        """The fix as ``tf-patches run`` flags."""
        return self.settings.to_flags()

    @property
    def apply_kwargs(self) -> str:
        """The fix as ``apply_all()`` arguments, as code."""
        return self.settings.to_code()
