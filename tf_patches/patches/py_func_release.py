"""py_function, numpy_function and py_func callbacks traced into a Dataset function or a
tf.function are freed with what traced them, and so is everything they capture.

TF issues 35084, 61344, 35010 (16 → 59 GB in three epochs of a ``py_function`` augmentation) and
35822; fixed upstream in TF 2.22 by pull request 123530. ``script_ops._internal_py_func`` registers
each callback weakly in ``script_ops._py_funcs`` and keeps its one strong reference in the
*outermost* graph's ``_py_funcs_used_in_graph`` list. A callback registered while a ``Dataset.map``
(filter, flat_map, interleave…) function or a ``tf.function`` is traced in eager mode goes to the
global default graph, which is never destroyed: it lives for good with everything it captures,
after the dataset or the function is gone. Measured (docs/measurements.md, "Today's stack";
``benchmarks/py_func_release.py``): a dataset
rebuilt in a loop whose map's callback captures 1 MiB grows by 1,025–1,100 KiB per rebuild on TF
2.12.1, 2.14 and 2.21.0 (320 of 320 callbacks alive after 300 rebuilds, with or without the other
patches); the same for a ``tf.function`` made per call; 0 on tf-nightly 2.22. ``reset_default_graph()``
and a collection free them (what Keras's ``clear_session`` does); ``script_ops.tape_cache`` stays
empty, so the callbacks and their captures are the leak.

The fix takes each callback registered while a function graph is being traced (eager outside
functions) off the global graph and hands it to every function graph it was traced in, from the
innermost (a nested ``tf.function``'s own concrete function, which TF reuses on its own) to the
outermost (the ``tf.function`` or dataset function whose graph runs it, a ``tf.cond`` branch or a
dataset built inside included); an eager dataset also keeps its functions' callbacks, and its
inputs' variant tensors, for as long as its own variant tensor lives, which a ``tf.function``
capture, an iterator or a derived dataset can hold after the dataset object and its graphs are
gone (measured: without it, a ``tf.function`` reading a deleted dataset raises "Could not find
callback"). TF's own code and ops run as before; only who holds the callback changes. Patched,
300 rebuilds (``benchmarks/``): 2.9 KiB per dataset on 2.21.0, 59.5 on 2.12.1 (TF 2.12's own
growth per dataset, py_function or not: 61); 0.1–0.3 per ``tf.function``. Graph-mode and TF1 code
are left to their graph, which frees its callbacks itself, and eager ``tf.py_function`` calls
(traced into nothing) are ``eager_py_function``'s. One case stock TF serves and this cannot: a
dataset made inside a ``tf.function`` and returned out of it, read after the function is gone
(its callbacks went with the function's graph; TF says "Could not find callback").
"""

from __future__ import annotations

import gc
import sys
import threading
import weakref
from typing import Any, Dict, List, Optional, Tuple

from ..core.canary import Finding
from ..core.context import PatchContext, tf_module
from ..core.gate import Gate
from ..core.patch import Patch
from ..core.retained import UnitSize
from ..core.signature import EagerExecutions, Installer, Probe, Signature, by_minor
from ._dataset_functions import own_init
from ._py_funcs import release_from_graph


class _Tracing:
    """Which graphs a py-func registered now is traced in, read with TF's own walk of
    ``_internal_py_func`` (``FuncGraph.outer_graph``, TF1 ``_FuncGraph._outer_graph``)."""

    def __init__(self) -> None:
        self.ops = tf_module("python.framework.ops")
        self.func_graph = tf_module("python.framework.func_graph").FuncGraph
        # TF1's Defun graph: gone from a TF without it, where only FuncGraphs are walked.
        self.defun_graph = getattr(tf_module("python.framework.function"), "_FuncGraph", ())

    def graphs(self) -> Tuple[List[Any], Any]:
        """The function graphs being traced, innermost first, and the graph TF ties the callback
        to; no function graphs where the callback does not go to the eager global graph."""
        graph = self.ops.get_default_graph()
        chain: List[Any] = []
        while True:
            if isinstance(graph, self.defun_graph):
                outer = graph._outer_graph
            elif isinstance(graph, self.func_graph):
                outer = graph.outer_graph
            else:
                break
            if outer is graph:
                break
            chain.append(graph)
            graph = outer
        # Tracing under a graph of the user's, or TF1 graph mode: that graph frees its callbacks.
        if chain and not self.ops.executing_eagerly_outside_functions():
            chain = []
        return chain, graph


def _registered_callback(result: Any, registry: Any) -> Any:
    """The callback behind the PyFunc / EagerPyFunc op that ``_internal_py_func`` returned (its
    tensors, a composite of them, or the op itself where it has no outputs), found by the op's
    ``token``; None where it cannot be read (then nothing is changed)."""
    nest = tf_module("python.util.nest")
    try:
        parts = [result] if hasattr(result, "get_attr") else nest.flatten(result, expand_composites=True)
        for part in parts:
            op = part if hasattr(part, "get_attr") else getattr(part, "op", None)
            if op is not None and op.type in ("PyFunc", "PyFuncStateless", "EagerPyFunc"):
                token = op.get_attr("token")
                return registry.get(token.decode() if isinstance(token, bytes) else token)
    except Exception:  # an output we cannot read: TF's own tie stays, as in stock TF
        return None
    return None


def _hand_over(graph: Any, callback: Any) -> None:
    """Make ``graph`` hold ``callback`` strongly, in the list TF keeps on a graph for this."""
    held = getattr(graph, "_py_funcs_used_in_graph", None)
    if held is None:
        held = graph._py_funcs_used_in_graph = []
    held.append(callback)


def _dataset_callbacks(dataset: Any, wrapper_type: type) -> List[Any]:
    """The callbacks handed to the graphs of ``dataset``'s own functions: every
    ``StructuredFunctionWrapper`` it holds (``_functions()`` misses some: from_generator's three,
    group_by_window's window-size function)."""
    callbacks: List[Any] = []
    for value in list(vars(dataset).values()):
        if isinstance(value, wrapper_type):
            graph = getattr(getattr(value, "_function", None), "graph", None)
            callbacks.extend(getattr(graph, "_py_funcs_used_in_graph", None) or ())
    return callbacks


def install(ctx: PatchContext) -> str:
    script_ops = tf_module("python.ops.script_ops")
    dataset_ops = tf_module("python.data.ops.dataset_ops")
    wrapper_type = tf_module("python.data.ops.structured_function").StructuredFunctionWrapper
    eager_tensor = tf_module("python.framework.ops").EagerTensor
    tracing = _Tracing()
    registry = script_ops._py_funcs
    original = script_ops._internal_py_func
    # Its own __init__, never an inherited one: replacing object.__init__ on DatasetV2 (a TF that
    # moved it) would change every class, and its revert would delete what it never set.
    original_init = own_init(dataset_ops.DatasetV2)
    # Variant tensors (by id) whose finalizer keeps callbacks (EagerTensors are unhashable); an
    # entry goes with its tensor, so an id is never read for another one.
    carrying: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()

    def _internal_py_func(*args, **kwargs):
        if not ctx.active:
            return original(*args, **kwargs)
        chain, outer = tracing.graphs()
        result = original(*args, **kwargs)
        if chain:
            callback = _registered_callback(result, registry)
            if callback is not None and release_from_graph(outer, callback):
                for graph in chain:
                    _hand_over(graph, callback)
        return result

    def __init__(self, *args, **kwargs):
        if not ctx.active:
            return original_init(self, *args, **kwargs)
        result = original_init(self, *args, **kwargs)
        variant = getattr(self, "_variant_tensor_attr", None)
        if not isinstance(variant, eager_tensor):
            return result
        # A tf.function's capture, an iterator or a derived dataset may hold the variant tensor
        # (which runs the functions) after this object and its graphs are gone: the callbacks,
        # and the input datasets' variants (which keep theirs), stay until the variant dies.
        kept: List[Any] = _dataset_callbacks(self, wrapper_type)
        try:
            inputs = list(self._inputs())
        except Exception:  # a dataset class of TF's that cannot say: its own callbacks only
            inputs = []
        for dataset in inputs:
            upstream = getattr(dataset, "_variant_tensor_attr", None)
            # (A dataset may share its input's variant: holding it from its own finalizer would
            # keep it for good.)
            if upstream is not None and upstream is not variant and carrying.get(id(upstream)) is upstream:
                kept.append(upstream)
        if kept:
            carrying[id(variant)] = variant
            weakref.finalize(variant, kept.clear).atexit = False
        return result

    ctx.replace_attribute(script_ops, "_internal_py_func", _internal_py_func)
    ctx.replace_attribute(dataset_ops.DatasetV2, "__init__", __init__)
    return ("py-func callbacks traced in eager mode live as long as the dataset or tf.function "
            "graphs they were traced in (an eager dataset's, as long as its variant tensor), not the "
            "global graph")


# --- diagnose: the live signature ---------------------------------------------------------------
_SIGNATURE = Signature(unit="traced py_function callbacks kept after their dataset or tf.function went",
                      unit_bytes=by_minor({}, None), floor=4,
                      fix="the callbacks are freed with the dataset or tf.function that traced them",
                      name='a py_function callback (and what it captures) kept after its dataset or '
                           'tf.function is gone',
                      code_fix=('build the dataset or the tf.function once and reuse it (not one per epoch '
                                'or call); keep what the callback captures small (pass data as tensors); '
                                'or call `tf.keras.backend.clear_session()` between rebuilds'),
                      upstream_fix='fixed in TensorFlow 2.22 (pull request 123530)')


def _in_from_generator() -> bool:
    """Whether ``Dataset.from_generator`` is on this thread's stack (its three callbacks are
    traced py-funcs too: counted once, by from_generator_release's probe, whose fix is theirs)."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_from_generator" and code.co_filename.endswith("from_generator_op.py"):
            return True
        frame = frame.f_back
    return False


class KeptTracedCallbacks(Probe):
    """Py-func callbacks registered while a function graph was traced in eager mode whose graphs
    are all gone while the global graph still holds them (read from its
    ``_py_funcs_used_in_graph`` list: garbage not collected yet is not counted, nor callbacks the
    patch handed to their graphs)."""

    def __init__(self) -> None:
        # Per callback registered in tracing: its graphs, the callback, the graph TF tied it to.
        self._traced: List[Tuple[List["weakref.ref[Any]"], "weakref.ref[Any]", "weakref.ref[Any]"]] = []
        self._lock = threading.Lock()
        self._unit_size = UnitSize()

    def install(self, installer: Installer, executor: EagerExecutions) -> None:
        script_ops = tf_module("python.ops.script_ops")
        tracing = _Tracing()
        registry = script_ops._py_funcs
        original = script_ops._internal_py_func
        traced = self._traced
        lock = self._lock

        def _internal_py_func(*args: Any, **kwargs: Any) -> Any:
            if not installer.active:
                return original(*args, **kwargs)
            chain, outer = tracing.graphs()
            result = original(*args, **kwargs)
            if chain and not _in_from_generator():  # from_generator_release's probe counts those
                callback = _registered_callback(result, registry)
                if callback is not None:
                    self.sites.hit()  # where it is traced: what is kept when its graphs go
                    try:
                        entry = ([weakref.ref(graph) for graph in chain], weakref.ref(callback), weakref.ref(outer))
                    except TypeError:
                        return result
                    with lock:
                        traced.append(entry)
            return result

        _internal_py_func.__wrapped__ = original  # type: ignore[attr-defined]
        installer.replace(script_ops, "_internal_py_func", _internal_py_func)

    def _kept(self) -> List[Any]:
        """The callbacks counted, and drops the entries done with (callback or outer graph gone)."""
        with self._lock:
            held: Dict[int, set] = {}  # id(outer graph) -> ids of the callbacks it holds
            live, kept = [], []
            for graphs, callback_ref, outer_ref in self._traced:
                callback, outer = callback_ref(), outer_ref()
                if callback is None or outer is None:
                    continue
                live.append((graphs, callback_ref, outer_ref))
                if any(graph() is not None for graph in graphs):
                    continue
                ids = held.get(id(outer))
                if ids is None:
                    ids = held[id(outer)] = set(map(id, list(getattr(outer, "_py_funcs_used_in_graph", ()))))
                if id(callback) in ids:
                    kept.append(callback)
            self._traced[:] = live
            return kept

    def count(self) -> int:
        return len(self._kept())

    def unit_bytes_here(self) -> Optional[float]:
        """What one kept callback holds: the objects it reaches (what it captured), walked
        together so that what they share counts once, per callback kept. A walk costs
        milliseconds: done again only when the count changed, at most every 5 s."""
        kept = self._kept()
        return self._unit_size(len(kept), lambda: kept)


# --- canary: is the bug still upstream? ---------------------------------------------------------
def canary() -> Finding:
    import tensorflow as tf

    class Payload:
        pass

    def traced(payload: Payload) -> None:
        """A dataset and a tf.function, each tracing a callback that captures ``payload``."""
        dataset = tf.data.Dataset.range(2).map(lambda x: tf.py_function(lambda v: (payload, v)[1], [x], tf.int64))
        list(dataset)
        function = tf.function(lambda x: tf.numpy_function(lambda v: (payload, v)[1], [x], tf.float32))
        function(tf.constant(1.0))

    refs = []
    for _ in range(3):
        payload = Payload()
        refs.append(weakref.ref(payload))
        traced(payload)
        del payload
    gc.collect()
    kept = sum(ref() is not None for ref in refs)
    return Finding(kept > 0, f"{kept} of 3 py_function callbacks' captures kept after their dataset and "
                             "tf.function were dropped")


# --- the declaration (core/patch.py) -------------------------------------------------------------
PATCH = Patch(
    name="py_func_release",
    title="Traced py_function callbacks are freed with their dataset or tf.function",
    issue="https://github.com/tensorflow/tensorflow/issues/35084",
    # Measured on 2.12.1, 2.14 and 2.21.0 (docs/measurements.md); 0 growth on tf-nightly 2.22.
    gate=Gate(versions=">=2.12", fixed_in="2.22",
                fixed_by="pull request 123530; measured fixed on tf-nightly-cpu 2.22"),
    install=install,
    signature=_SIGNATURE,
    probe=KeptTracedCallbacks,
    canary=canary,
)
