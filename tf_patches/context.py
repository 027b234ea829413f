"""What a patch's ``install`` gets: the environment, its options, and undo-recorded ways to change
TensorFlow (attributes through gorilla, environment variables). Every change is journaled where it
is made, so ``revert`` is the journal played backwards and no patch writes its undo twice.
"""

from __future__ import annotations

import importlib
import os
import sys
from itertools import repeat
from operator import is_
from types import ModuleType
from typing import Any, Callable, List, Mapping, Tuple

from .environment import Environment
from .errors import logger


def tf_module(dotted: str) -> ModuleType:
    """Import ``tensorflow.<dotted>``, or ``tensorflow_core.<dotted>`` on TF 1.15–2.1 (where the
    real modules live), so a patch reaches the module TF's own code uses."""
    errors = []
    for root in ("tensorflow_core", "tensorflow"):
        name = f"{root}.{dotted}"
        if root == "tensorflow_core" and "tensorflow_core" not in sys.modules:
            continue
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            errors.append(f"{name}: {exc}")
    raise ImportError("; ".join(errors))


class PatchContext:
    def __init__(self, name: str, env: Environment, options: Mapping[str, Any]):
        self.name = name
        self.env = env
        self.options = dict(options)
        self._undo: List[Tuple[str, Callable[[], None]]] = []

    # -- changes, each journaled for revert -------------------------------------------------
    def replace_attribute(self, owner: Any, attribute: str, replacement: Any) -> Any:
        """Set ``owner.attribute = replacement`` with gorilla, keeping the original; return it.

        An attribute inherited rather than owned is deleted again on revert, so reverting leaves
        no shadowing copy in a subclass.
        """
        if not hasattr(owner, attribute):
            raise AttributeError(f"{_describe(owner)} has no attribute {attribute!r}")
        import gorilla  # here, not at module level: start-up stays cheap where nothing installs

        original = getattr(owner, attribute)
        owned = attribute in vars(owner)
        # allow_hit: we replace on purpose; store_hit: gorilla keeps the original for revert.
        settings = gorilla.Settings(allow_hit=True, store_hit=True)
        patch = gorilla.Patch(owner, attribute, replacement, settings=settings)
        gorilla.apply(patch)

        def undo() -> None:
            gorilla.revert(patch)
            if not owned:  # gorilla put the inherited original into the subclass: take it out
                delattr(owner, attribute)

        self._undo.append((f"{_describe(owner)}.{attribute}", undo))
        return original

    def replace_everywhere(self, owner: ModuleType, attribute: str, replacement: Any) -> List[str]:
        """Replace a function in its module and in every loaded module bound to it by name
        (``from x import f`` copies the reference: ``tf.compat.v1.get_seed`` is one).

        Returns the bindings patched, as ``module.attribute`` strings. Modules loaded later that
        import the name get the replacement from ``owner``; revert swaps those back too.
        """
        original = getattr(owner, attribute)
        patched = [f"{owner.__name__}.{attribute}"]
        self.replace_attribute(owner, attribute, replacement)
        for module_name, module, name in _bindings(original):
            if module is owner or name.startswith("_gorilla_"):  # gorilla's own copy of the original
                continue
            self.replace_attribute(module, name, replacement)
            patched.append(f"{module_name}.{name}")

        def rebind_late_copies() -> None:
            for _, module, name in _bindings(replacement):
                vars(module)[name] = original

        # Runs after the per-binding undos (journal is played backwards).
        self._undo.insert(0, (f"late bindings of {attribute}", rebind_late_copies))
        return patched

    def set_environ(self, variable: str, value: str) -> None:
        """Set an environment variable, restoring (or removing) the previous value on revert."""
        previous = os.environ.get(variable)
        os.environ[variable] = value

        def undo() -> None:
            if previous is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = previous

        self._undo.append((f"${variable}", undo))

    def on_revert(self, what: str, undo: Callable[[], None]) -> None:
        """Register any other undo step (a cache to clear, a hook to disarm)."""
        self._undo.append((what, undo))

    # -- engine side ------------------------------------------------------------------------
    def revert(self) -> List[str]:
        """Undo every change, newest first; returns the errors (an undo never stops the others)."""
        errors = []
        while self._undo:
            what, undo = self._undo.pop()
            try:
                undo()
            except Exception as exc:
                logger.warning("tf-patches: reverting %s of %s failed: %s", what, self.name, exc)
                errors.append(f"{what}: {exc}")
        return errors

    @property
    def changes(self) -> List[str]:
        return [what for what, _ in self._undo]


def _bindings(target: Any) -> List[Tuple[str, ModuleType, str]]:
    """Every (module name, module, attribute) of a loaded module bound to ``target``.

    TF has some 3,000 modules: each namespace is first searched at C speed (``map(is_, …)``, by
    identity, never ``==``), and only the few that hold ``target`` are walked in Python.
    """
    found = []
    for module_name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if type(namespace) is not dict or not any(map(is_, repeat(target), namespace.values())):
            continue
        found.extend((module_name, module, name) for name, value in list(namespace.items())
                     if value is target)
    return found


def _describe(owner: Any) -> str:
    return getattr(owner, "__name__", None) or type(owner).__name__
