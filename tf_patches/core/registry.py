"""The registry: every patch tf-patches knows, in the order they are applied."""

from __future__ import annotations

import importlib
import sys
import threading
from types import ModuleType
from typing import Any, List, Mapping, Optional, Tuple, Union

from .environment import Environment
from .errors import TfPatchesError
from .gate import Gate, Verdict
from .options import Option, core_options
from .patch import Patch, nothing

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


# What a patch module may define at its top level under a public name (no leading underscore):
# the declaration read by from_module (ARCHITECTURE.md, "How to add a patch"), and the
# helpers it lists in PUBLIC, which other modules (tests, tools, benchmarks, other patches) import.
# Anything else public is refused: a misspelled SIGNTURE or LIFECYCLE_OPTION would be ignored.
DECLARATIONS = frozenset({
    "NAME", "TITLE", "ISSUE_URL", "GATE", "OPTIONS", "precondition", "prepare", "install", "advise",
    "SIGNATURE", "PROBE", "canary", "TRAP", "LIFECYCLE_OPTIONS", "LIFECYCLE_NEEDS", "PUBLIC",
})


def _imported(module: ModuleType, value: Any) -> bool:
    """Whether a name bound to ``value`` is bound by an import: a module, or a function or class
    (or typing form) of another module."""
    if isinstance(value, ModuleType) or type(value).__module__ == "__future__":
        return True
    owner = getattr(value, "__module__", None)
    return (callable(value) or isinstance(value, type)) and owner is not None and owner != module.__name__


def _sources(module: ModuleType) -> List[ModuleType]:
    """Where a patch module imports constants from (``KIB``, ``logger``): core, the patches, typing."""
    found = [sys.modules["typing"]] if "typing" in sys.modules else []
    for package in ("tf_patches.core", "tf_patches.patches"):
        loaded = sys.modules.get(package)
        if loaded is not None:
            found.extend(other for other in vars(loaded).values()
                         if isinstance(other, ModuleType) and other is not module)
    return found


def unknown_names(module: ModuleType) -> List[str]:
    """The module's public top-level names that are neither its declaration, nor listed in its
    ``PUBLIC``, nor imported. A class or function a declaration names (``PROBE = KeptGenerators``)
    is known under its own name."""
    namespace = vars(module)
    public = namespace.get("PUBLIC", ())
    if isinstance(public, str) or not all(isinstance(name, str) for name in public):
        raise TypeError(f"patch module {module.__name__}: PUBLIC must be a tuple of names, got {public!r}")
    known = DECLARATIONS.union(public)
    declared = [namespace[name] for name in DECLARATIONS if name in namespace]
    found = [name for name in public if name not in namespace]  # misspelled there
    for name, value in namespace.items():
        # identity first: getattr on a lazy proxy (errors.logger) would load what it stands for
        if name.startswith("_") or name in known or (
                any(value is other for other in declared) and getattr(value, "__name__", None) == name):
            continue
        if not _imported(module, value):
            found.append(name)
    if found:  # a constant that another tf_patches module holds under the same name is imported
        sources = _sources(module)
        found = [name for name in found
                 if name not in namespace  # listed in PUBLIC, misspelled there
                 or not any(getattr(source, name, nothing) is namespace[name] for source in sources)]
    return found


# The registry's name for a declaration, as the engine, the tools and the tests read it.
PatchSpec = Patch


def _old_protocol(module: ModuleType) -> Patch:
    """A module of the 0.2 protocol (NAME, TITLE, ... as module names), read into a Patch."""
    missing = [attr for attr in ("NAME", "TITLE", "ISSUE_URL", "GATE") if not hasattr(module, attr)]
    if missing:
        raise TypeError(f"patch module {module.__name__} lacks {', '.join(missing)}")
    unknown = unknown_names(module)
    if unknown:
        import difflib  # only to word the refusal

        guesses = [f"{name} (did you mean {close[0]}?)" if close else name
                   for name in unknown for close in [difflib.get_close_matches(name, DECLARATIONS, 1)]]
        raise TypeError(
            f"patch module {module.__name__} defines public names tf-patches does not know: "
            f"{', '.join(guesses)}. A patch module declares {', '.join(sorted(DECLARATIONS))}; "
            "a helper that other modules import is listed in PUBLIC, any other gets a leading underscore")
    return Patch(name=module.NAME, title=module.TITLE, issue=module.ISSUE_URL, gate=module.GATE,
                 options=getattr(module, "OPTIONS", ()), precondition=getattr(module, "precondition", nothing),
                 prepare=getattr(module, "prepare", nothing), install=getattr(module, "install", None),
                 advise=getattr(module, "advise", None), signature=getattr(module, "SIGNATURE", None),
                 probe=getattr(module, "PROBE", None), canary=getattr(module, "canary", None),
                 trap=getattr(module, "TRAP", None), lifecycle_options=getattr(module, "LIFECYCLE_OPTIONS", {}))


def from_module(module: ModuleType) -> Patch:
    """The declaration of a patch module: its ``PATCH`` (core/patch.py)."""
    declared = getattr(module, "PATCH", None)
    if declared is None:
        return _old_protocol(module)
    if not isinstance(declared, Patch):
        raise TypeError(f"patch module {module.__name__}: PATCH must be a tf_patches.core.patch.Patch, "
                        f"got {type(declared).__name__}")
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
