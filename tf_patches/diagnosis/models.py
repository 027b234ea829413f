"""How many Keras models the program builds, and how often it clears Keras' session: the evidence
for "models built in a loop: ``clear_session()``, or a fresh process per fold".

- ``models_built``: models constructed after TensorFlow was imported, counted in ``Model.__new__``
  (Keras 3, Keras 2 and tf_keras alike; every model class goes through it, and no Keras code
  reads ``__new__``'s signature, unlike ``__init__``'s, which Keras 3 inspects for configs). A
  model made while another is being made (``Model(inputs, outputs)`` becoming a ``Functional``)
  counts once, and so does a ``Sequential`` with the ``Functional`` it builds inside itself.
  ``keras.Model`` is hooked when the module defining it finishes importing, so a program that
  never imports Keras pays nothing.
- ``clear_session_calls``: calls of ``tf.compat.v1.reset_default_graph`` from a function named
  ``clear_session``: every Keras ``clear_session`` (Keras 3's TF backend, Keras 2, tf_keras) makes
  one, looked up on the public module at call time, so a wrapper there sees it whichever
  binding of ``clear_session`` the program called. ``graph_resets`` counts every call.

Both pass through once the diagnosis stops (the :class:`~tf_patches.core.signature.Installer`
puts TF's and Keras' own functions back); counting costs nothing per step, only per model.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Dict, List, Tuple

from ..core import importhook

# Where each Keras keeps its Model class: Keras 3, Keras 2.13-2.15, Keras <= 2.12, tf_keras.
MODEL_MODULES = ("keras.src.models.model", "keras.src.engine.training", "keras.engine.training",
                 "tf_keras.src.engine.training")


class KerasModels:
    """The counters, and the hooks that feed them."""

    def __init__(self) -> None:
        self.models_built = 0
        self.clear_session_calls = 0
        self.graph_resets = 0
        self.failed: Dict[str, str] = {}
        self._installer: Any = None
        self._hooked: List[Tuple[str, Any]] = []
        self._making = threading.local()  # inside a model's __new__ (or Sequential's build)

    def install(self, installer: Any) -> None:
        """Count from now: graph resets at once (TF is imported), models when Keras is."""
        self._installer = installer
        try:
            self._watch_resets(installer)
        except Exception as exc:
            self.failed["clear_session_calls"] = f"{type(exc).__name__}: {exc}"
        for name in MODEL_MODULES:
            hook = self._hook_for(name)
            self._hooked.append((name, hook))
            importhook.after_import(name, hook)

    def remove(self) -> None:
        """Cancel the hooks not run yet (the installer removes the wrappers)."""
        for name, hook in self._hooked:
            importhook.cancel(name, hook)
        self._hooked.clear()

    def reset(self) -> None:
        """Counts from now (a forked child)."""
        self.models_built = self.clear_session_calls = self.graph_resets = 0

    def to_dict(self) -> Dict[str, Any]:
        return {"models_built": self.models_built, "clear_session_calls": self.clear_session_calls,
                "graph_resets": self.graph_resets}

    # -- clear_session ----------------------------------------------------------------------
    def _watch_resets(self, installer: Any) -> None:
        from ..core.context import tf_module

        original = tf_module("python.framework.ops").reset_default_graph
        counter = self

        def reset_default_graph() -> Any:
            if installer.active:
                counter.graph_resets += 1
                if sys._getframe(1).f_code.co_name == "clear_session":
                    counter.clear_session_calls += 1
            return original()

        reset_default_graph.__wrapped__ = original  # type: ignore[attr-defined]
        for attribute in ("__name__", "__qualname__", "__doc__", "__module__"):
            setattr(reset_default_graph, attribute, getattr(original, attribute, None))
        # Every public module that binds it (tf.compat.v1, and compat.v2's compat.v1 that Keras 2
        # reaches it through), found once: each is a module TF made at import.
        for name, module in list(sys.modules.items()):
            if name.startswith("tensorflow") and getattr(module, "reset_default_graph", None) is original:
                installer.replace(module, "reset_default_graph", reset_default_graph)

    # -- models -----------------------------------------------------------------------------
    def _hook_for(self, name: str) -> Any:
        def hook(module: Any) -> None:
            # An import hook: whatever goes wrong must not break `import keras`.
            try:
                if self._installer is not None and self._installer.active:
                    self._watch_models(module)
            except Exception as exc:
                self.failed["models_built"] = f"{name}: {type(exc).__name__}: {exc}"

        return hook

    def _watch_models(self, module: Any) -> None:
        model = getattr(module, "Model", None)
        if not isinstance(model, type):
            return
        original = model.__new__  # Keras' own (a staticmethod, unwrapped by the lookup)
        making = self._making
        counter = self

        def __new__(cls: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(making, "depth", 0) or not self._installer.active:
                return original(cls, *args, **kwargs)
            making.depth = 1
            try:
                if not _inside_sequential_build(sys._getframe(1)):
                    counter.models_built += 1
                return original(cls, *args, **kwargs)
            finally:
                making.depth = 0

        __new__.__wrapped__ = original  # type: ignore[attr-defined]
        self._installer.replace(model, "__new__", staticmethod(__new__))


def _inside_sequential_build(frame: Any, depth: int = 12) -> bool:
    """Whether a Keras 3 ``Sequential`` is building the ``Functional`` it keeps inside: part of a
    model already counted."""
    while frame is not None and depth:
        code = frame.f_code
        if code.co_name in ("build", "_maybe_rebuild") and code.co_filename.endswith("sequential.py"):
            return True
        frame, depth = frame.f_back, depth - 1
    return False
