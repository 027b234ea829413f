"""Dataset.from_generator frees its generator, and what the generator captures, with the dataset.

TF issue 57690 (and 123269), fixed upstream in TF 2.22 by pull request 123530. ``from_generator``
builds its dataset from three py-func callbacks (``tf.numpy_function`` / ``tf.py_function`` traced
inside tf.data functions), which hold the generator. TF keeps the only strong reference to each in
the outermost graph's ``_py_funcs_used_in_graph`` list; in eager mode that is the global default
graph, never destroyed, so nothing the generator reaches is ever freed: 0 of 3 objects freed after
``del ds; gc.collect()``, measured on TF 2.12.1 and 2.21.0 (issue 9: every release 2.12–2.21). A
dataset whose generator holds 1 MiB, made, read and dropped (``benchmarks/``): +1,054 KiB each on
2.21.0, +1,151 on 2.12.1; patched +17 and +191, TF's own per-dataset growth (+60 with 4 MiB
captured). Unpatched on tf-nightly-cpu 2.22.0.dev20260905 TF keeps the callbacks on the dataset's
FuncGraph: 3 of 3 captures freed (scripts/canary.py), +71 KiB per dataset holding 1 MiB: the gate
ends there.

The fix collects the callbacks an eager ``from_generator`` call registers (on this thread), takes
them off the global graph and keeps them instead for as long as the dataset's variant tensor
lives: everything that can still run them holds that tensor (derived datasets hold their input,
iterators their dataset, a ``tf.function`` its captures). A ``weakref.finalize`` keeps them, not an
attribute: on TF 2.12 an EagerTensor's ``__dict__`` outlives the tensor (measured), which would
leak them again. Graph-mode calls are left as they are: their graph frees the callbacks itself.
"""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any, Dict, List, Optional, Tuple

from ..core.canary import Finding
from ..core.context import PatchContext, tf_module
from ..core.gate import Gate
from ..core.patch import Patch
from ..core.retained import UnitSize
from ..core.signature import EagerExecutions, Installer, Probe, Signature, by_minor
from ._py_funcs import release_from_graph


class _Registered(threading.local):
    """The callbacks registered on this thread since a patched from_generator call began."""

    callbacks: Optional[List[Any]] = None


def install(ctx: PatchContext) -> str:
    script_ops = tf_module("python.ops.script_ops")
    from_generator_op = tf_module("python.data.ops.from_generator_op")
    context = tf_module("python.eager.context")
    ops = tf_module("python.framework.ops")
    registry = script_ops._py_funcs
    registered = _Registered()
    # Read before it is replaced: another thread may call the replacement the moment it is installed.
    insert = registry.insert
    original = from_generator_op._from_generator

    def insert_and_note(func):
        if not ctx.active:
            return insert(func)
        token = insert(func)
        if registered.callbacks is not None:
            registered.callbacks.append(func)
        return token

    def _from_generator(*args, **kwargs):
        if not ctx.active:
            return original(*args, **kwargs)
        if not context.executing_eagerly():
            return original(*args, **kwargs)
        outer, registered.callbacks = registered.callbacks, []
        try:
            dataset = original(*args, **kwargs)
            callbacks = registered.callbacks
        finally:
            registered.callbacks = outer
        graph = ops.get_default_graph()  # the global graph: the outermost one in eager mode
        owned = [func for func in callbacks if release_from_graph(graph, func)]
        if owned:
            # finalize holds owned.clear, and so the callbacks, until the variant tensor dies.
            weakref.finalize(dataset._variant_tensor, owned.clear).atexit = False
        return dataset

    ctx.replace_attribute(registry, "insert", insert_and_note)
    ctx.replace_attribute(from_generator_op, "_from_generator", _from_generator)
    return (
        "from_generator's py-func callbacks live as long as its dataset's variant tensor, "
        "not the global graph"
    )


# --- diagnose: the live signature ---------------------------------------------------------------
_SIGNATURE = Signature(unit="Dataset.from_generator datasets gone whose generator is kept",
                      unit_bytes=by_minor({}, None), floor=4, fix="the generator is freed with its dataset",
                      name='a Dataset.from_generator dataset gone whose generator is never freed',
                      code_fix=('make the dataset once and reuse it (not one per fold or epoch), or keep what'
                                ' the generator holds small; `tf.data.Dataset.from_tensor_slices` for '
                                'in-memory data'),
                      upstream_fix='fixed in TensorFlow 2.22 (pull request 123530)')


class KeptGenerators(Probe):
    """Datasets made eagerly by ``from_generator``, gone, whose py-func callbacks (and so the
    generator) the global graph still holds in its ``_py_funcs_used_in_graph`` list (read from
    it: garbage not collected yet is not counted, nor are callbacks the patch took off that list,
    whichever was installed first)."""

    def __init__(self) -> None:
        # Per dataset gone: the graph that held its callbacks then, and the callbacks.
        self._gone: List[Tuple["weakref.ref[Any]", List["weakref.ref[Any]"]]] = []
        self._lock = threading.Lock()
        self._unit_size = UnitSize()

    def install(self, installer: Installer, executor: EagerExecutions) -> None:
        script_ops = tf_module("python.ops.script_ops")
        from_generator_op = tf_module("python.data.ops.from_generator_op")
        context = tf_module("python.eager.context")
        ops = tf_module("python.framework.ops")
        registry = script_ops._py_funcs
        local = threading.local()
        insert = registry.insert
        original = from_generator_op._from_generator

        def noting_insert(func: Any) -> Any:
            token = insert(func)
            noted = getattr(local, "noted", None)
            if noted is not None and installer.active:
                try:
                    noted.append(weakref.ref(func))
                except TypeError:
                    pass
            return token

        def _from_generator(*args: Any, **kwargs: Any) -> Any:
            if not installer.active or not context.executing_eagerly():
                return original(*args, **kwargs)
            outer, local.noted = getattr(local, "noted", None), []
            try:
                dataset = original(*args, **kwargs)
                noted = local.noted
            finally:
                local.noted = outer
            if noted:
                self.sites.hit()  # where the dataset is made: what is kept when it goes
                # The outermost graph in eager mode: the one TF ties the callbacks to.
                graph = weakref.ref(ops.get_default_graph())
                weakref.finalize(dataset._variant_tensor, self._went, graph, noted).atexit = False
            return dataset

        _from_generator.__wrapped__ = original  # type: ignore[attr-defined]
        installer.replace(registry, "insert", noting_insert)
        installer.replace(from_generator_op, "_from_generator", _from_generator)

    def _went(self, graph: "weakref.ref[Any]", refs: List["weakref.ref[Any]"]) -> None:
        with self._lock:
            self._gone.append((graph, refs))

    def count(self) -> int:
        with self._lock:
            held: Dict[int, set] = {}  # id(graph) -> ids of the callbacks it holds
            kept = []
            for graph_ref, refs in self._gone:
                graph = graph_ref()
                if graph is None:
                    continue
                ids = held.get(id(graph))
                if ids is None:
                    ids = held[id(graph)] = set(map(id, list(getattr(graph, "_py_funcs_used_in_graph", ()))))
                if any(ref() is not None and id(ref()) in ids for ref in refs):
                    kept.append((graph_ref, refs))
            # A dataset whose callbacks the graph let go of is done with: it cannot be kept again.
            self._gone = kept
            return len(kept)

    def unit_bytes_here(self) -> Optional[float]:
        """What one kept dataset holds: the objects its callbacks reach (the generator and what
        it captured), walked together so that what they share counts once, per dataset kept.
        A walk costs milliseconds: done again only when the count changed, at most every 5 s."""
        return self._unit_size(self.count(), self._kept_callbacks)

    def _kept_callbacks(self) -> List[Any]:
        with self._lock:
            callbacks = [ref() for _, refs in self._gone for ref in refs]
        return [callback for callback in callbacks if callback is not None]


# --- canary: is the bug still upstream? ---------------------------------------------------------
def canary() -> Finding:
    import tensorflow as tf

    class Payload:
        pass

    refs = []
    for _ in range(3):
        payload = Payload()
        refs.append(weakref.ref(payload))
        dataset = tf.data.Dataset.from_generator(lambda p=payload: iter([1, 2]), output_types=tf.int32)
        list(dataset)
        del dataset, payload
    gc.collect()
    kept = sum(ref() is not None for ref in refs)
    return Finding(kept > 0, f"{kept} of 3 generators' captures kept after the dataset was dropped")


# --- the declaration (core/patch.py) -------------------------------------------------------------
PATCH = Patch(
    name="from_generator_release",
    title="Dataset.from_generator frees its generator with the dataset",
    issue="https://github.com/tensorflow/tensorflow/issues/57690",
    # Measured on 2.12.1 and 2.21.0, reproduced on every release between (issue 9).
    gate=Gate(versions=">=2.12", fixed_in="2.22",
                fixed_by="pull request 123530; measured fixed on tf-nightly-cpu 2.22.0.dev20260905"),
    install=install,
    signature=_SIGNATURE,
    probe=KeptGenerators,
    canary=canary,
)
