"""Graph-mode ``tf.custom_gradient`` registrations live as long as the graph that made them.

TF issues 97697, 62854 and 61791 (tf-keras 286), fixed upstream in TF 2.22 by pull request 109334
(the gradient closure no longer captures the forward tensors). Each graph-mode call of a
``tf.custom_gradient`` function (``_graph_mode_decorator`` in ``ops/custom_gradient.py``) registers
its gradient as ``CustomGradient-<uid>`` in the process-wide gradient registry
(``ops._gradient_registry``) and never removes it. The registered closure holds the symbolic
tensors of the trace, so the FuncGraph stays alive. Keras' train step registers two per trace (the
optimizer's all-reduce path), so building and fitting model after model leaks, ``clear_session()``
or not: 60 small models +513 MB on 2.21.0, +377 MB on 2.14.1 (docs/measurements.md, "Loops"); here 2
registrations and 3.8 MB per small model on 2.21.0, 0 and 0.1 MB patched. Unpatched on
tf-nightly-cpu 2.22.0.dev20260905: 2 registrations but +0.3 MB per model (scripts/canary.py): the
gate ends there.

The fix keeps TF's registration and only changes who owns it: the registry entry refers to the
gradient function weakly, the graph being traced holds it strongly, and the entry is removed when
the function dies with that graph. Whatever can still build a gradient for the op (its graph, a
cond/while op holding its branch graph, a ConcreteFunction) keeps the graph and so the entry;
lookups return the very function TF registered, so gradients are bit-identical. One thing changes:
a graph rebuilt from a copied GraphDef/FunctionDef after the original graph is gone finds no
gradient, as in a new process. Registrations made elsewhere (SavedModel loading names its
gradients ``CustomGradient-<uid>`` too) stay as they were.
"""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any, Optional

from ..core.canary import Finding
from ..core.context import PatchContext, tf_module
from ..core.gate import Gate
from ..core.patch import Patch
from ..core.signature import EagerExecutions, Installer, Probe, Signature, by_minor


_HOLDER = "_tf_patches_custom_gradients"  # graph attribute: the gradient functions it registered


class WeakEntry(dict):
    """A gradient-registry entry (``{type: function, location: frame}``) whose function is held
    through a weak reference; ``Registry.lookup`` reads it with ``[]`` and gets the function."""

    def __getitem__(self, key: Any) -> Any:
        value = dict.__getitem__(self, key)
        if type(value) is weakref.ref:
            value = value()
            if value is None:  # the graph died and the removal callback has not run yet
                raise LookupError("the graph that registered this custom gradient was freed")
        return value


class _Trace:
    """One graph-mode custom_gradient call: the graph it traces into and the name it registers."""

    __slots__ = ("graph", "name")

    def __init__(self, graph: Any):
        self.graph = graph
        self.name: Optional[str] = None


def _hold_weakly(registry: Any, name: str, graph: Any, type_tag: str) -> None:
    """Move the strong reference of registry entry ``name`` onto ``graph``; the entry is removed
    when the function dies."""
    entries = registry._registry
    entry = entries.get(name)
    if entry is None or isinstance(entry, WeakEntry):
        return
    function = entry[type_tag]
    holder = getattr(graph, _HOLDER, None)
    if holder is None:
        holder = []
        setattr(graph, _HOLDER, holder)
    holder.append(function)

    def forget(ref: "weakref.ref[Any]") -> None:
        current = registry._registry.get(name)
        if isinstance(current, WeakEntry) and dict.__getitem__(current, type_tag) is ref:
            registry._registry.pop(name, None)

    weak = WeakEntry(entry)
    dict.__setitem__(weak, type_tag, weakref.ref(function, forget))
    entries[name] = weak


def _hold_strongly(registry: Any, type_tag: str) -> None:
    """Turn every live weak entry back into a plain one, as stock TF holds it; drop dead ones."""
    entries = registry._registry
    for name, entry in list(entries.items()):
        if isinstance(entry, WeakEntry):
            function = dict.__getitem__(entry, type_tag)()
            if function is None:
                entries.pop(name, None)
            else:
                entries[name] = dict(entry, **{type_tag: function})


def install(ctx: PatchContext) -> str:
    custom_gradient = tf_module("python.ops.custom_gradient")
    ops = tf_module("python.framework.ops")
    registry = ops._gradient_registry
    type_tag = tf_module("python.framework.registry")._TYPE_TAG
    original_decorator = custom_gradient._graph_mode_decorator
    original_generate_name = custom_gradient.generate_name
    tracing = threading.local()  # the innermost graph-mode call on this thread

    def generate_name() -> str:
        if not ctx.active:
            return original_generate_name()
        name = original_generate_name()
        trace = getattr(tracing, "trace", None)
        # The decorator names its gradient before calling the user's function, so the first name
        # is its own; names drawn later in the same call (SavedModel loading) are left alone.
        if trace is not None and trace.name is None:
            trace.name = name
        return name

    def graph_mode_decorator(f, args, kwargs):
        if not ctx.active:  # reverted: a decorated function traced later registers as stock's
            return original_decorator(f, args, kwargs)
        outer = getattr(tracing, "trace", None)
        trace = tracing.trace = _Trace(ops.get_default_graph())
        try:
            result = original_decorator(f, args, kwargs)
        finally:
            tracing.trace = outer
        if trace.name is not None:
            _hold_weakly(registry, trace.name, trace.graph, type_tag)
        return result

    # Journal order: on revert the wrappers go first, then the live entries turn strong again.
    ctx.on_revert("weak custom-gradient registry entries", lambda: _hold_strongly(registry, type_tag))
    ctx.replace_attribute(custom_gradient, "generate_name", generate_name)
    ctx.replace_attribute(custom_gradient, "_graph_mode_decorator", graph_mode_decorator)
    return (
        "graph-mode custom_gradient entries in the gradient registry are held by their graph "
        "and removed with it; gradients unchanged"
    )


# --- diagnose: the live signature ---------------------------------------------------------------
_SIGNATURE = Signature(unit="tf.custom_gradient registrations kept (one or two per traced train step)",
                      unit_bytes=by_minor({}, None), floor=16, fix="registrations freed with their graph",
                      name='a tf.custom_gradient registration, and the graph it holds, kept per trace',
                      code_fix=('trace fewer times: build each model and its train step once and reuse them '
                                '(`tf.keras.backend.clear_session()` does not free these), or a fresh process'
                                ' per model (`tf_patches.run_isolated`)'),
                      upstream_fix='fixed in TensorFlow 2.22 (pull request 109334)')


class KeptCustomGradients(Probe):
    """``CustomGradient-<uid>`` entries TF's gradient registry holds strongly (read from it). The
    patch's entries (:class:`WeakEntry`) hold their function weakly (its graph holds it): not
    counted, dead or not collected yet."""

    def __init__(self) -> None:
        self._entries: Any = None
        self._start = 0

    def install(self, installer: Installer, executor: EagerExecutions) -> None:
        self._entries = tf_module("python.framework.ops")._gradient_registry._registry
        self._start = self._read()
        # The sites: each registration draws its name here first (the count is read from the
        # registry, which keeps no stack).
        custom_gradient = tf_module("python.ops.custom_gradient")
        original = custom_gradient.generate_name
        sites = self.sites

        def generate_name() -> str:
            if installer.active:
                sites.hit()
            return original()

        generate_name.__wrapped__ = original  # type: ignore[attr-defined]
        installer.replace(custom_gradient, "generate_name", generate_name)

    def _read(self) -> int:
        for _ in range(3):  # another thread registering meanwhile: read again
            try:
                return sum(1 for name, entry in list(self._entries.items())
                           if name.startswith("CustomGradient-") and not isinstance(entry, WeakEntry))
            except RuntimeError:
                continue
        return 0

    def count(self) -> int:
        return max(0, self._read() - self._start) if self._entries is not None else 0


# --- canary: is the bug still upstream? ---------------------------------------------------------
def canary() -> Finding:
    """The model-per-fold loop (docs/measurements.md, "Loops"): 2.21 grows ≈3.8 MB per Keras model
    fit and cleared."""
    import tensorflow as tf

    registered = tf_module("python.framework.ops")._gradient_registry._registry

    def entries() -> int:
        return sum(name.startswith("CustomGradient-") for name in list(registered))

    x = tf.random.stateless_uniform([64, 8], seed=[1, 2])
    y = tf.random.stateless_uniform([64, 1], seed=[3, 4])

    def fold() -> None:
        model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"),
                                     tf.keras.layers.Dense(1)])
        model.compile("adam", "mse")
        model.fit(x, y, epochs=1, batch_size=32, verbose=0)
        tf.keras.backend.clear_session()
        gc.collect()

    folds = 8
    fold()  # warm-up: allocator pools, Keras' first-use caches
    start_entries = entries()
    from ..core.memory import measure_growth  # here: the canary alone measures

    mb = measure_growth(fold, folds, warmup=0, samples=2).growth / 1e6 / folds
    return Finding(mb > 1.0, f"{mb:+.2f} MB and {(entries() - start_entries) / folds:.1f} registry "
                             f"entries per Keras model fit and cleared ({folds} folds)")


# --- the declaration (core/patch.py) -------------------------------------------------------------
PATCH = Patch(
    name="custom_gradient_registry",
    title="tf.custom_gradient registrations freed with their graph: no FuncGraph leak per trace",
    issue="https://github.com/tensorflow/tensorflow/issues/97697",
    # 2.12 registers as much, but something else keeps Keras 2's graphs there: a fit loop grows
    # 1.9 MB per model on 2.12.1 with or without this patch. From 2.14 the registry is what leaks.
    gate=Gate(versions=">=2.14", fixed_in="2.22",
                fixed_by="pull request 109334; measured fixed on tf-nightly-cpu 2.22.0.dev20260905"),
    install=install,
    signature=_SIGNATURE,
    probe=KeptCustomGradients,
    canary=canary,
)
