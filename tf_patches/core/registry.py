"""The registry: every patch tf-patches knows, in the order they are applied."""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import Any, List, Mapping, Optional, Tuple, Union

from .environment import Environment
from .errors import TfPatchesError
from .gate import Gate, Verdict
from .options import Option, core_options
from .patch import Patch

PATCH_MODULES: Tuple[str, ...] = (
    "seed_kernel_cache",
    "op_determinism",
    "rfft_guard",
    "graph_growth_guard",
    "custom_gradient_registry",
    "from_generator_release",
    "py_func_release",
    "v1_graph_seed",
    "eager_py_function",
    "keras2_predict_loop",
    "keras3_predict_loop",
    "retracing",
    "py311_eager_op_leak",
    "gpu_nondeterministic_ops",
    "dataset_epoch_repeat",
    "parallel_random_map",
    "keras_seed",
)


def from_module(module: ModuleType) -> Patch:
    """The declaration of a patch module: its ``PATCH`` (core/patch.py)."""
    declared = getattr(module, "PATCH", None)
    if declared is None:
        raise TypeError(f"patch module {module.__name__} declares no PATCH = Patch(...) (tf_patches.core.patch; "
                        "0.2's NAME, GATE, install... as module names are no longer read)")
    if not isinstance(declared, Patch):
        raise TypeError(f"patch module {module.__name__}: PATCH is a {type(declared).__name__}, "
                        "not a tf_patches.core.patch.Patch")
    return declared


def _unloadable(name: str, exc: BaseException) -> Patch:
    """A built-in patch whose module cannot be loaded (an import error, a declaration refused): it
    fails when applied, with the reason, and the others apply."""
    reason = f"tf_patches.patches.{name} could not be loaded: {type(exc).__name__}: {exc}"

    def refuse(_ctx: Any) -> None:
        raise TfPatchesError(reason)

    return _Unloadable(name=name, title=f"{name} (not loaded)", issue="", gate=Gate(), prepare=refuse,
                       install=refuse)


class _Unloadable(Patch):
    def check(self, env: Environment, options: Mapping[str, Any]) -> Verdict:
        return True, ""  # on every build, TF or not: it fails when prepared, with the reason


_specs: List[Patch] = []
_lock = threading.RLock()  # the first specs() may come from many threads at once


def specs() -> Tuple[Patch, ...]:
    """The registered patches (the built-in ones are loaded on first use, once, whichever thread
    asks first)."""
    if not _specs:
        with _lock:
            if not _specs:
                # Built in full, then published: a thread that skips the lock sees all or nothing.
                loaded = [_load(name) for name in PATCH_MODULES]
                _specs[:0] = loaded
    return tuple(_specs)


def _load(name: str) -> Patch:
    try:
        return from_module(importlib.import_module(f"tf_patches.patches.{name}"))
    except Exception as exc:  # never break the host program: the patch fails alone, with the reason
        return _unloadable(name, exc)


def register(patch: Union[Patch, ModuleType]) -> Patch:
    """Add a patch of your own after the built-in ones: a :class:`Patch`, or a module declaring
    one as ``PATCH`` (the built-in ones' shape)."""
    spec = patch if isinstance(patch, Patch) else from_module(patch)
    with _lock:
        if spec.name in names():
            raise ValueError(f"a patch named {spec.name!r} is already registered")
        if spec.name.strip().lower() == "none":  # "none" is the off switch of only= / TF_PATCHES_ONLY
            raise ValueError("a patch cannot be named 'none'")
        _specs.append(spec)
    return spec


def unregister(name: str) -> None:
    """Remove a patch added with :func:`register` (revert it first)."""
    if name in PATCH_MODULES:
        raise ValueError(f"{name!r} is built in; exclude it with exclude=[{name!r}] instead")
    with _lock:
        _specs[:] = [spec for spec in _specs if spec.name != name]


def all_options() -> Tuple[Option, ...]:
    """Every option ``apply_all`` takes: the core ones, then each patch's."""
    found = list(core_options(names()))
    for spec in specs():
        found.extend(spec.options)
    return tuple(found)


def names() -> Tuple[str, ...]:
    return tuple(spec.name for spec in specs())


def by_name(name: str) -> Optional[Patch]:
    """The registered patch named ``name``, or None."""
    return next((found for found in specs() if found.name == name), None)
