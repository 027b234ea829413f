"""The registry: every patch tf-patches knows, in the order they are applied."""

from __future__ import annotations

import dataclasses
import importlib
import sys
import threading
from dataclasses import dataclass, field
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Tuple

from .environment import Environment
from .errors import TfPatchesError
from .gate import Gate, Verdict
from .options import Option, core_options

if TYPE_CHECKING:  # read from the patch modules; imported by those that declare them
    from .canary import Finding
    from .signature import Probe, Signature
    from .traps import Trap

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


def _nothing(*_args: Any) -> None:
    return None


# What a patch module may define at its top level under a public name (no leading underscore):
# the declaration read by PatchSpec.from_module (ARCHITECTURE.md, "How to add a patch"), and the
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
                 or not any(getattr(source, name, _nothing) is namespace[name] for source in sources)]
    return found


@dataclass(frozen=True)
class PatchSpec:
    """What a patch module declares, read once (:meth:`from_module`). (A docstring of its own also
    spares ``dataclass`` an ``inspect.signature`` of the class to write one: ≈0.3 ms at import.)"""

    name: str
    title: str
    issue_url: str
    gate: Gate
    options: Tuple[Option, ...]
    precondition: Callable[[Environment, Mapping[str, Any]], Optional[str]]
    prepare: Callable[..., None]
    install: Callable[..., Optional[str]]
    # An advisory patches nothing: when its gate matches, the report and a warning give this advice.
    advise: Optional[Callable[[Environment], str]] = None
    # Its leak's live signature, counted by `diagnose` (core/signature.py): both or neither.
    signature: Optional["Signature"] = None
    probe: Optional[Callable[[], "Probe"]] = None
    # Its upstream canary, run by scripts/canary.py (core/canary.py).
    canary: Optional[Callable[[], "Finding"]] = None
    # A reproducibility trap's declaration, read by `tf-patches repro` (core/traps.py).
    trap: Optional["Trap"] = None
    # apply_all keywords under which it installs on a CPU machine where the defaults do not (an
    # opt-in asked for, the build it is for described with env=): for the lifecycle suite and the canary.
    # Not compared: a mapping has no hash, and a PatchSpec stays hashable.
    lifecycle_options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), compare=False)
    # (module under tensorflow, attribute) it needs beyond those it replaces: a moved-symbol check.
    lifecycle_needs: Tuple[Tuple[str, str], ...] = ()

    @classmethod
    def from_module(cls, module: ModuleType) -> "PatchSpec":
        missing = [attr for attr in ("NAME", "TITLE", "ISSUE_URL", "GATE") if not hasattr(module, attr)]
        if not (hasattr(module, "install") or hasattr(module, "advise")):
            missing.append("install (or advise, for an advisory)")
        if hasattr(module, "SIGNATURE") != hasattr(module, "PROBE"):
            missing.append("PROBE (it declares SIGNATURE)" if hasattr(module, "SIGNATURE")
                           else "SIGNATURE (it declares PROBE)")
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
        signature = getattr(module, "SIGNATURE", None)
        if signature is not None:
            signature = dataclasses.replace(signature, patch=module.NAME)
        trap = getattr(module, "TRAP", None)
        if trap is not None:
            trap = dataclasses.replace(trap, patch=module.NAME)
        return cls(
            name=module.NAME,
            title=module.TITLE,
            issue_url=module.ISSUE_URL,
            gate=module.GATE,
            options=tuple(getattr(module, "OPTIONS", ())),
            precondition=getattr(module, "precondition", _nothing),
            prepare=getattr(module, "prepare", _nothing),
            install=getattr(module, "install", _nothing),
            advise=getattr(module, "advise", None),
            signature=signature,
            probe=getattr(module, "PROBE", None),
            canary=getattr(module, "canary", None),
            trap=trap,
            lifecycle_options=MappingProxyType(dict(getattr(module, "LIFECYCLE_OPTIONS", {}))),
            lifecycle_needs=tuple(getattr(module, "LIFECYCLE_NEEDS", ())),
        )

    @classmethod
    def unloadable(cls, name: str, exc: BaseException) -> "PatchSpec":
        """A built-in patch whose module cannot be loaded (an import error, a module refused by
        :meth:`from_module`): it fails when applied, with the reason, and the others apply."""
        reason = f"tf_patches.patches.{name} could not be loaded: {type(exc).__name__}: {exc}"

        def refuse(_ctx: Any) -> None:
            raise TfPatchesError(reason)

        return _Unloadable(name=name, title=f"{name} (not loaded)", issue_url="", gate=Gate(), options=(),
                           precondition=_nothing, prepare=refuse, install=refuse)

    def check(self, env: Environment, options: Mapping[str, Any]) -> Verdict:
        verdict, reason = self.gate.check(env)
        if verdict is False:
            return verdict, reason
        extra = self.precondition(env, options)
        if extra:
            return False, extra
        return verdict, reason


class _Unloadable(PatchSpec):
    def check(self, env: Environment, options: Mapping[str, Any]) -> Verdict:
        return True, ""  # on every build, TF or not: it fails when prepared, with the reason


_specs: List[PatchSpec] = []
_lock = threading.RLock()  # the first specs() may come from many threads at once


def specs() -> Tuple[PatchSpec, ...]:
    """The registered patches (the built-in ones are loaded on first use, once, whichever thread
    asks first)."""
    if not _specs:
        with _lock:
            if not _specs:
                # Built in full, then published: a thread that skips the lock sees all or nothing.
                loaded = [_load(name) for name in PATCH_MODULES]
                _specs[:0] = loaded
    return tuple(_specs)


def _load(name: str) -> PatchSpec:
    try:
        return PatchSpec.from_module(importlib.import_module(f"tf_patches.patches.{name}"))
    except Exception as exc:  # never break the host program: the patch fails alone, with the reason
        return PatchSpec.unloadable(name, exc)


def register(module: ModuleType) -> PatchSpec:
    """Add a patch module of your own (same shape as the built-in ones) after the built-in ones."""
    spec = PatchSpec.from_module(module)
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


def by_name(name: str) -> Optional[PatchSpec]:
    """The registered patch named ``name``, or None."""
    return next((found for found in specs() if found.name == name), None)
