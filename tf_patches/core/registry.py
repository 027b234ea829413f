"""The registry: every patch tf-patches knows, in the order they are applied."""

from __future__ import annotations

import dataclasses
import importlib
import threading
from dataclasses import dataclass, field
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Tuple

from .environment import Environment
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


@dataclass(frozen=True)
class PatchSpec:
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

    def check(self, env: Environment, options: Mapping[str, Any]) -> Verdict:
        verdict, reason = self.gate.check(env)
        if verdict is False:
            return verdict, reason
        extra = self.precondition(env, options)
        if extra:
            return False, extra
        return verdict, reason


_specs: List[PatchSpec] = []
_lock = threading.RLock()  # the first specs() may come from many threads at once


def specs() -> Tuple[PatchSpec, ...]:
    """The registered patches (the built-in ones are loaded on first use, once, whichever thread
    asks first)."""
    if not _specs:
        with _lock:
            if not _specs:
                # Built in full, then published: a thread that skips the lock sees all or nothing.
                loaded = [PatchSpec.from_module(importlib.import_module(f"tf_patches.patches.{name}"))
                          for name in PATCH_MODULES]
                _specs[:0] = loaded
    return tuple(_specs)


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
