"""op_determinism, round two: Keras 3's own XLA under op determinism (keras PR 20315, TF 69417).

Keras 3 compiles ``fit`` with XLA by itself on a GPU (``jit_compile="auto"``), and XLA has no
deterministic GPU MaxPool gradient: under op determinism every CNN with max pooling raised
``UnimplementedError`` (TF 69417, 8+ users). Keras 3.7.0 turned auto-XLA off while op
determinism is on (keras PR 20315: ``model_supports_jit`` returns False then); 3.0–3.6 did not
(read in their wheels' ``keras/src/trainers/trainer.py``). Where this Keras lacks it, detected by
its own decision function's answer (not a version list), ``_resolve_auto_jit_compile`` answers
False while op determinism is on, as newer Keras does; an explicit ``jit_compile=True`` is left as
asked and warned about on a machine with a GPU. Checked on the CPU, with Keras told of a GPU by
its device query; not run on a GPU.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from typing import Any, Callable, Optional

from ..core import traps
from ..core.context import PatchContext, tf_module

TRAINER_MODULE = "keras.src.trainers.trainer"  # Keras 3.0 to 3.15


class _NoLayers:
    """The least a model is to ``model_supports_jit``: no layer that refuses XLA."""

    def _flatten_layers(self, *args: Any, **kwargs: Any) -> Any:
        return iter(())


def keras_disables_auto_xla(trainer: Any, determinism: Callable[[], bool]) -> Optional[bool]:
    """Whether this Keras's own XLA decision says no under op determinism (keras PR 20315): asked of
    its ``model_supports_jit`` while op determinism is on, else read in its source; None where
    neither can tell."""
    supports = getattr(trainer, "model_supports_jit", None)
    if not callable(supports):
        return None
    if determinism():
        try:
            return not supports(_NoLayers())
        except Exception:  # a newer Keras asking more of a model: read its source instead
            pass
    try:
        return "is_op_determinism_enabled" in inspect.getsource(supports)
    except (OSError, TypeError):
        return None


def install(ctx: PatchContext, keras: Any, trap_name: str) -> str:
    """Turn off Keras 3's auto-XLA under op determinism where this Keras does not; return the
    report's words ("" for a Keras with no XLA of its own: Keras 2's ``jit_compile`` is None)."""
    try:
        trainer = importlib.import_module(TRAINER_MODULE)
    except ImportError:
        return ""
    version = getattr(keras, "__version__", "?")
    backend = getattr(getattr(trainer, "backend", None), "backend", None)
    if backend is None or backend() != "tensorflow":
        return ""
    determinism = tf_module("python.framework.config").is_op_determinism_enabled
    handled = keras_disables_auto_xla(trainer, determinism)
    if handled:
        return f"Keras {version} turns jit_compile='auto' off under op determinism itself"
    trainer_class = getattr(trainer, "Trainer", None)
    resolve = inspect.getattr_static(trainer_class, "_resolve_auto_jit_compile", None)
    setting = inspect.getattr_static(trainer_class, "jit_compile", None)
    if handled is None or not inspect.isfunction(resolve) or not isinstance(setting, property):
        return f"Keras {version}: its XLA decision not found, left as it is"

    def _resolve_auto_jit_compile(self: Any) -> Any:
        resolved = resolve(self)
        if ctx.active and resolved and determinism():
            return False  # as Keras 3.7+: no XLA of its own choosing under op determinism
        return resolved

    def set_jit_compile(self: Any, value: Any) -> None:
        if ctx.active and value and determinism() and _gpu_visible():
            traps.warn(trap_name, (
                "jit_compile=True under op determinism on a GPU: XLA has no deterministic GPU "
                "MaxPool gradient, so fit() of a model with max pooling raises "
                "UnimplementedError (TF 69417); left as asked. Compile with jit_compile=False, "
                "or leave it 'auto' (resolved to False under op determinism, as Keras 3.7+ does)"))
        setting.fset(self, value)

    ctx.replace_attribute(trainer_class, "_resolve_auto_jit_compile", _resolve_auto_jit_compile)
    ctx.replace_attribute(trainer_class, "jit_compile",
                          property(setting.fget, set_jit_compile, setting.fdel, setting.__doc__))
    return (f"Keras {version}: jit_compile='auto' resolved to False while op determinism is on, "
            "as Keras 3.7+ does (keras PR 20315); an explicit jit_compile=True warned about on a GPU")


def _gpu_visible() -> bool:
    """A device other than the CPU, as Keras's own auto-XLA decision asks TF."""
    tf = sys.modules.get("tensorflow")
    devices = tf.config.list_physical_devices() if tf is not None else []
    return any(device.device_type != "CPU" for device in devices)
