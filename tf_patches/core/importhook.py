"""Hooks that run when a named module starts importing (before its code runs) or has finished,
through one small ``sys.meta_path`` finder, standard library only.

The auto-apply bootstrap runs in every interpreter of a process tree, most of which never import
TensorFlow: it must cost next to nothing until they do. wrapt's import hooks cost ≈50–70 ms at
start-up (wrapt 2.x imports asyncio); this finder costs two dict lookups per import.
"""

import sys
import _thread  # not threading or typing: each costs a millisecond or more at start-up
# Nor `from __future__ import annotations` (an import of its own): annotations are strings.

TYPE_CHECKING = False  # typing.TYPE_CHECKING, which type checkers read alike

if TYPE_CHECKING:  # typing's names only for checkers: importing them costs start-up time
    from types import ModuleType
    from typing import Any, Callable, Dict, Iterable, List, Optional

_lock = _thread.RLock()
_before: "Dict[str, List[Callable[[], None]]]" = {}
_after: "Dict[str, List[Callable[[ModuleType], None]]]" = {}
_searching = _thread._local()  # names this thread is looking up through the other finders


def before_import(names: "Iterable[str]", hook: "Callable[[], None]") -> None:
    """Call ``hook()`` once, when the first of ``names`` starts importing (before its code runs),
    or at once if one of them is imported already."""
    names = tuple(names)
    fired = False

    def once() -> None:
        nonlocal fired
        with _lock:
            if fired:
                return
            fired = True
            for name in names:  # the other names' entries are spent too
                hooks = _before.get(name, [])
                if once in hooks:
                    hooks.remove(once)
        hook()

    with _lock:
        if any(name in sys.modules for name in names):
            ready = True
        else:
            ready = False
            for name in names:
                _before.setdefault(name, []).append(once)
            _install()
    if ready:
        once()


def after_import(name: str, hook: "Callable[[ModuleType], None]") -> None:
    """Call ``hook(module)`` once ``name`` has finished importing, or at once if it is in
    ``sys.modules`` already (still initialising included, as wrapt does). An exception from the
    hook reaches the importer: a hook that must not break imports catches its own."""
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            _after.setdefault(name, []).append(hook)
            _install()
            return
    hook(module)


def initializing(name: str) -> bool:
    """Whether module ``name`` is in ``sys.modules`` but still running its code (a patch installed
    from inside its import: ``import keras`` first finishes TF's import, and so apply_all's
    pending installs, inside Keras's own)."""
    spec = getattr(sys.modules.get(name), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def after_first_import(names: "Iterable[str]", hook: "Callable[[ModuleType], None]") -> "Callable[[], None]":
    """``hook(module)`` once, when the first of ``names`` not yet imported finishes importing,
    for a patch that must wait for a module its package has yet to load. Returns what cancels it."""
    waiting = [name for name in names if name not in sys.modules]
    fired = []

    def once(module: "ModuleType") -> None:
        with _lock:
            if fired:
                return
            fired.append(module)
        cancel_all()
        hook(module)

    def cancel_all() -> None:
        for name in waiting:
            cancel(name, once)

    for name in waiting:
        after_import(name, once)
    return cancel_all


def when_loaded(names: "Iterable[str]", hook: "Callable[[ModuleType], None]", what: str) -> "Optional[Callable[[], None]]":
    """``hook(module)`` with the first of ``names`` that is loaded: now, where one is in
    ``sys.modules`` and done initialising (what it raises reaches the caller); else once the first
    of those not imported yet finishes importing (a package still importing: ``import keras``
    first finishes TF's import, and so a patch's install, inside Keras's own, before the module the
    patch needs is loaded). From the import hook, an exception is logged as a warning naming
    ``what``, never raised into the user's import; so it is where every one of ``names`` is still
    importing (there is nothing to wait for: it runs now). Returns what cancels a hook not run yet
    (None: it ran now)."""
    names = tuple(names)
    for name in names:
        module = sys.modules.get(name)
        if module is not None and not initializing(name):
            hook(module)
            return None

    def logged(module: "ModuleType") -> None:
        try:
            hook(module)
        except Exception as exc:  # an import hook must never break the user's import
            from .errors import logger  # on failure only: the bootstrap imports this module

            logger.warning("tf-patches: %s failed once %s loaded (%s: %s); left as it is",
                           what, getattr(module, "__name__", module), type(exc).__name__, exc)

    if all(name in sys.modules for name in names):  # every one still importing: nothing to wait for
        logged(sys.modules[names[0]])
        return None
    return after_first_import(names, logged)


# One apply_all() waiting for `import tensorflow`: the auto-apply bootstrap's, or a call made before
# TF was imported (core.engine). It is kept here, not by its owner, so that the engine runs it
# before reading its own state without naming the tool that armed it (issue 38).
_waiting: "Optional[Callable[[], None]]" = None
_running = 0  # deferred applies running now (the apply_all() inside one must not wait again)


def defer(apply: "Callable[[], None]", triggers: "Iterable[str]") -> None:
    """Run ``apply()`` once: when the first of ``triggers`` starts importing (before its code runs),
    or at :func:`run_deferred`, whichever comes first. A later ``defer`` replaces what waits."""
    global _waiting
    with _lock:
        _waiting = apply
    before_import(triggers, run_deferred)


def run_deferred() -> None:
    """Run now what waits (nothing if it ran already or was disarmed)."""
    global _waiting, _running
    with _lock:
        apply, _waiting = _waiting, None
        _running += apply is not None
    if apply is not None:
        try:
            apply()
        finally:
            with _lock:
                _running -= 1


def disarm() -> None:
    """Forget what waits (``revert_all()`` before TensorFlow was imported)."""
    global _waiting
    with _lock:
        _waiting = None


def deferred() -> bool:
    """Whether an apply waits, or runs now."""
    return _waiting is not None or _running > 0


def cancel(name: str, hook: "Callable[..., Any]") -> None:
    """Forget a hook not yet run (wrapt cannot)."""
    with _lock:
        for table in (_before, _after):
            hooks = table.get(name, [])
            if hook in hooks:
                hooks.remove(hook)


def _install() -> None:
    if not any(type(finder) is _Finder for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


class _Finder:
    """Finds nothing itself: runs the before-hooks, and where after-hooks wait, takes the spec
    the other finders give and chains its loader."""

    def find_spec(self, fullname: str, path: "Any" = None, target: "Any" = None) -> "Any":
        if fullname not in _before and fullname not in _after:
            return None
        searching = getattr(_searching, "names", None)
        if searching is not None and fullname in searching:
            return None  # our own look-up through the other finders
        with _lock:
            before = _before.pop(fullname, [])
        for hook in before:
            hook()  # may register after-hooks for this very import
        if fullname not in _after:
            return None
        spec = _find_elsewhere(fullname, path, target)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _ChainedLoader(spec.loader, fullname)
        return spec

    def invalidate_caches(self) -> None:
        return None


def _find_elsewhere(fullname: str, path: "Any", target: "Any") -> "Any":
    names = getattr(_searching, "names", None)
    if names is None:
        names = _searching.names = set()
    names.add(fullname)
    try:
        for finder in list(sys.meta_path):
            find_spec = getattr(finder, "find_spec", None)
            if type(finder) is _Finder or find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None
    finally:
        names.discard(fullname)


class _ChainedLoader:
    """The real loader, then the after-hooks; the module keeps the real loader afterwards."""

    def __init__(self, loader: "Any", name: str):
        self._loader = loader
        self._name = name

    def __getattr__(self, attribute: str) -> "Any":  # get_data, get_resource_reader, is_package…
        return getattr(self._loader, attribute)

    def create_module(self, spec: "Any") -> "Optional[ModuleType]":
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: "ModuleType") -> None:
        self._loader.exec_module(module)
        self._restore(module)
        self._run_hooks(module)

    def load_module(self, fullname: str) -> "ModuleType":  # loaders from before PEP 451
        module = self._loader.load_module(fullname)
        self._restore(module)
        self._run_hooks(module)
        return module

    def _restore(self, module: "ModuleType") -> None:
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self._loader
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self._loader

    def _run_hooks(self, module: "ModuleType") -> None:
        with _lock:
            hooks = _after.pop(self._name, [])
        for hook in hooks:
            hook(sys.modules.get(self._name, module))
