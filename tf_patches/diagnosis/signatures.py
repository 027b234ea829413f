"""The signature of each known leak, as ``tf-patches diagnose`` counts it in a running program.

A signature is a count of the leak's unit (a fresh stateful kernel, an op added to a Session's
graph after its warm-up, a callback kept…), read from TensorFlow's own structures where it keeps
them and counted at the call where it does not. Each probe measures the *effect* (a kernel that
is built, a callback that stays), not the call, so it reads zero where the fix is applied,
whichever was installed first. The probes reuse the patches' own detection code: the seed
patch's fresh-pair note, the graph-growth guard in a counting mode, the FFT guard's targets, the
Keras 2 adapter lookup.

Memory: a unit measured in ``shared/FINDINGS.md`` (or the patch's docstring) has its size here;
the others are fitted from RSS against the counts by :mod:`tf_patches.diagnosis.report`.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ..core.context import _MISSING, raw_attribute, restore, tf_module

KIB = 1024


def _by_minor(sizes: Mapping[str, int], default: Optional[int]) -> Callable[[str], Optional[int]]:
    """A unit size measured per TF minor version (``"2.12"``), else ``default``."""

    def size(version: str) -> Optional[int]:
        return sizes.get(".".join(version.split(".")[:2]), default)

    return size


@dataclass(frozen=True)
class Signature:
    """One known leak: the patch that fixes it and how its unit is counted and sized."""

    patch: str  # registry name of the fix (or the advisory)
    unit: str  # what one count is, plural ("fresh stateful random kernels")
    unit_bytes: Callable[[str], Optional[int]]  # by TF version; None: fitted from RSS
    floor: int  # counts up to this are set-up, not a loop: the signature has not fired
    fix: str  # what to do, after the patch's own line
    run_flags: Tuple[str, ...] = ()  # `tf-patches run` flags of the fix
    apply_kwargs: str = ""  # the same as apply_all() arguments


SIGNATURES: Tuple[Signature, ...] = (
    Signature(
        "seed_kernel_cache", "fresh stateful random kernels (eager random ops under a global seed, no op seed; "
                             "the most the kernel cache held at once)",
        # FINDINGS.md: 35,576 KiB per 1,000 calls on 2.21.0, 37,993 on 2.12.1.
        _by_minor({"2.12": 37_993 * KIB // 1000}, 35_576 * KIB // 1000), floor=256,
        fix="stock numbers through stateless twins, no kernel per draw"),
    Signature(
        "graph_growth_guard", "ops added to a Session's graph after its first 10 runs",
        # FINDINGS.md: 2 ops per run cost +43.9 MiB per 1,000 runs on 2.21.
        _by_minor({}, int(43.9 * 1024 * KIB / 2000)), floor=32,
        fix="build every op before the run loop; the guard names the line that adds them "
            "(finalize mode turns it into an error there)",
        run_flags=("--graph-growth-guard", "finalize"), apply_kwargs='graph_growth_guard="finalize"'),
    Signature(
        "eager_py_function", "eager tf.py_function calls, each a new kernel and a callback kept",
        # The patch's docstring: 39,700 KiB per 1,000 calls on 2.21.0, 43,000 on 2.12.1.
        _by_minor({"2.12": 43_000 * KIB // 1000}, 39_700 * KIB // 1000), floor=16,
        fix="pooled tokens: kernels reused, callbacks freed"),
    Signature(
        "from_generator_release", "Dataset.from_generator datasets gone whose generator is kept",
        _by_minor({}, None), floor=4, fix="the generator is freed with its dataset"),
    Signature(
        "custom_gradient_registry", "tf.custom_gradient registrations kept (one or two per traced train step)",
        _by_minor({}, None), floor=16, fix="registrations freed with their graph"),
    Signature(
        "keras2_predict_loop", "Keras 2 input pipelines built for in-memory data (predict/fit/evaluate calls)",
        # The patch's docstring: 248 KiB per predict on 2.12.1, 268 on 2.14.1.
        _by_minor({"2.12": 248 * KIB, "2.14": 268 * KIB}, 258 * KIB), floor=8,
        fix="one in-memory batch served without the leaking pipeline"),
    Signature(
        "rfft_guard", "FFT ops not pinned to the CPU on the nvidia-tensorflow 1.15.5 build whose cuFFT ops leak",
        _by_minor({}, None), floor=0, fix="run them on the CPU (or refuse them)",
        run_flags=("--rfft-guard", "cpu"), apply_kwargs='rfft_guard="cpu"'),
    Signature(
        "py311_eager_op_leak", "eager tensors made (each leaks a little on Python >= 3.11 with TF < 2.17)",
        # The leak is per EagerTensor, whether an op made it or a conversion did: one 24-byte block
        # never freed (tracemalloc, 2.12.1), 16-34 B of RSS per tensor in a fresh loop on 2.12.1
        # (tf.constant 16, tf.zeros([1]) 34: tests/test_diagnosis.py). The advisory's 64 MB per
        # 100,000 tf.zeros([1]) on 2.16 (3 tensors each) is 213 B.
        _by_minor({"2.16": 213}, 24), floor=10_000,
        fix="an advisory, nothing to patch: upgrade to TensorFlow >= 2.17 or run on Python 3.10"),
)
BY_PATCH: Dict[str, Signature] = {signature.patch: signature for signature in SIGNATURES}


class Installer:
    """Replaces attributes for the probes and puts them back, only where they still hold the
    probe. A patch applied meanwhile wraps the probe and keeps working: the probe passes through
    once ``active`` is False, and is marked spent, so that whoever restores it later (the patch's
    revert, another diagnosis) restores what the probe replaced instead (:func:`context.unspent`)."""

    def __init__(self) -> None:
        self.active = True
        self._undo: List[Tuple[Any, str, Any, Any]] = []
        self._callbacks: List[Callable[[], None]] = []

    def replace(self, owner: Any, attribute: str, replacement: Callable[..., Any]) -> Any:
        original = getattr(owner, attribute)
        raw = raw_attribute(owner, attribute)
        setattr(owner, attribute, replacement)
        self._undo.append((owner, attribute, raw, replacement))
        return original

    def on_remove(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    def remove(self) -> None:
        self.active = False
        for owner, attribute, raw, replacement in reversed(self._undo):
            if getattr(owner, attribute, None) is not replacement:
                # Wrapped since by someone else: it passes through, and goes when they restore it.
                try:
                    replacement.__tf_patches_spent__ = (raw,)
                except AttributeError:
                    pass
                continue
            restore(owner, attribute, raw)
        self._undo.clear()
        for callback in self._callbacks:
            callback()
        self._callbacks.clear()


class Probe:
    """Counts one signature. ``install`` may raise (a TF internal that moved): the diagnosis says so."""

    patch = ""
    watches_eager_ops = False  # counts through EagerExecutions: nothing without its wrapper

    def install(self, installer: Installer, executor: "EagerExecutions") -> None:
        raise NotImplementedError

    def count(self) -> int:
        raise NotImplementedError


class EagerExecutions:
    """One wrapper of ``TFE_Py_FastPathExecute`` (every generated eager op goes through it) shared
    by the probes that watch eager ops by name. The hot path is one dict lookup."""

    def __init__(self) -> None:
        self.watchers: Dict[str, Callable[[tuple], None]] = {}
        self._installed = False

    def watch(self, op: str, callback: Callable[[tuple], None]) -> None:
        self.watchers[op] = callback

    def install(self, installer: Installer) -> None:
        if self._installed or not self.watchers:
            return
        pywrap_tfe = tf_module("python.pywrap_tfe")
        original = pywrap_tfe.TFE_Py_FastPathExecute
        get = self.watchers.get

        def execute(*args):
            watcher = get(args[1])
            if watcher is not None and installer.active:
                watcher(args)
            return original(*args)

        installer.replace(pywrap_tfe, "TFE_Py_FastPathExecute", execute)
        self._installed = True


def attribute_after(args: tuple, name: str) -> Any:
    """The value following the attribute name ``name`` in a fast-path call's arguments (names are
    str; never ``in``/``index``, whose == on a tensor would run an op)."""
    for index in range(2, len(args) - 1):
        value = args[index]
        if type(value) is str and value == name:
            return args[index + 1]
    return _MISSING


class FreshSeedKernels(Probe):
    """TF 36164: a fresh ``(seed, seed2)`` pair from ``get_seed`` reaching a stateful random op's
    eager kernel (the seed patch's note; with the patch on, the pair goes to a stateless twin).
    ``tf.random.set_seed`` (and ``clear_kernel_cache``) empties TF's kernel cache: the count is the
    most fresh kernels the cache held at once, which is what RSS keeps (freed kernels' memory is
    reused, not returned), so a loop that re-seeds before a few draws does not read as a leak."""

    patch = "seed_kernel_cache"
    watches_eager_ops = True

    def __init__(self) -> None:
        self._live = 0  # fresh kernels since the cache was last cleared
        self._peak = 0

    def install(self, installer: Installer, executor: "EagerExecutions") -> None:
        from ..patches import seed_kernel_cache as patch

        random_seed = tf_module("python.framework.random_seed")
        context = tf_module("python.eager.context")
        pywrap_tfe = tf_module("python.pywrap_tfe")
        note = patch._Note()
        get_seed = patch.noting_get_seed(random_seed.get_seed, context, note, installer)
        get_seed.__wrapped__ = random_seed.get_seed  # type: ignore[attr-defined]
        clear_caches = pywrap_tfe.TFE_ContextClearCaches

        def stateful(args: tuple) -> None:
            pair = note.pair
            if pair is None:
                return
            if attribute_after(args, "seed2") is pair[1] and attribute_after(args, "seed") is pair[0]:
                note.pair = None
                live = self._live = self._live + 1
                if live > self._peak:
                    self._peak = live

        def cleared(*args: Any) -> Any:
            # What set_seed and clear_kernel_cache call (looked up at call time in both).
            self._live = 0
            return clear_caches(*args)

        cleared.__wrapped__ = clear_caches  # type: ignore[attr-defined]
        installer.replace(random_seed, "get_seed", get_seed)
        installer.replace(pywrap_tfe, "TFE_ContextClearCaches", cleared)
        for op in patch.STATEFUL_OPS:
            executor.watch(op, stateful)

    def count(self) -> int:
        return self._peak


class FreshPyFuncTokens(Probe):
    """TF 35010: an eager ``EagerPyFunc`` op run with a token never seen (a new kernel, a callback
    kept); the patch reuses pooled tokens."""

    patch = "eager_py_function"
    watches_eager_ops = True

    def __init__(self) -> None:
        self._tokens: set = set()

    def install(self, installer: Installer, executor: EagerExecutions) -> None:
        tokens = self._tokens

        def eager_py_func(args: tuple) -> None:
            token = attribute_after(args, "token")
            if type(token) is str or type(token) is bytes:
                tokens.add(token)

        executor.watch("EagerPyFunc", eager_py_func)

    def count(self) -> int:
        return len(self._tokens)


class GraphGrowth(Probe):
    """Ops added to a Session's graph after its warm-up (the guard's own test, counting mode)."""

    patch = "graph_growth_guard"

    def __init__(self) -> None:
        self._guard: Any = None

    def install(self, installer: Installer, executor: EagerExecutions) -> None:
        from ..core.frames import LIBRARY_PACKAGES, package_dirs
        from ..patches.graph_growth_guard import Guard

        session = tf_module("python.client.session")
        self._guard = guard = Guard("count", package_dirs(LIBRARY_PACKAGES + ("tf_patches",)))
        original = session.BaseSession.run
        counting = guard.wrap(original)

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not installer.active:
                return original(self, *args, **kwargs)
            return counting(self, *args, **kwargs)

        run.__wrapped__ = original  # type: ignore[attr-defined]
        installer.replace(session.BaseSession, "run", run)

    def count(self) -> int:
        return self._guard.added_total if self._guard is not None else 0


class KeptGenerators(Probe):
    """TF 57690: datasets made eagerly by ``from_generator``, gone, whose py-func callbacks (and
    so the generator) the global graph still holds in its ``_py_funcs_used_in_graph`` list (read
    from it: garbage not collected yet is not counted, nor are callbacks the patch took off that
    list, whichever was installed first)."""

    patch = "from_generator_release"

    def __init__(self) -> None:
        # Per dataset gone: the graph that held its callbacks then, and the callbacks.
        self._gone: List[Tuple["weakref.ref[Any]", List["weakref.ref[Any]"]]] = []
        self._lock = threading.Lock()

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


class KeptCustomGradients(Probe):
    """TF 97697: ``CustomGradient-<uid>`` entries TF's gradient registry holds strongly (read from
    it). The patch's entries hold their function weakly (its graph holds it): not counted, dead
    or not collected yet."""

    patch = "custom_gradient_registry"

    def __init__(self) -> None:
        self._entries: Any = None
        self._weak: Tuple[type, ...] = ()
        self._start = 0

    def install(self, installer: Installer, executor: EagerExecutions) -> None:
        from ..patches.custom_gradient_registry import WeakEntry

        self._weak = (WeakEntry,)
        self._entries = tf_module("python.framework.ops")._gradient_registry._registry
        self._start = self._read()

    def _read(self) -> int:
        weak = self._weak
        for _ in range(3):  # another thread registering meanwhile: read again
            try:
                return sum(1 for name, entry in list(self._entries.items())
                           if name.startswith("CustomGradient-") and not isinstance(entry, weak))
            except RuntimeError:
                continue
        return 0

    def count(self) -> int:
        return max(0, self._read() - self._start) if self._entries is not None else 0


class KerasPipelines(Probe):
    """TF 58676: Keras 2's ``TensorLikeDataAdapter`` slicing in-memory data into a new pipeline,
    eagerly (the patch serves one batch without it)."""

    patch = "keras2_predict_loop"

    def __init__(self) -> None:
        self._count = 0

    def install(self, installer: Installer, executor: EagerExecutions) -> None:
        from ..patches.keras2_predict_loop import adapter_module

        context = tf_module("python.eager.context")
        adapter = adapter_module().TensorLikeDataAdapter
        original = adapter.slice_inputs

        def slice_inputs(adapter_self: Any, *args: Any, **kwargs: Any) -> Any:
            if installer.active and context.executing_eagerly():
                self._count += 1
            return original(adapter_self, *args, **kwargs)

        slice_inputs.__wrapped__ = original  # type: ignore[attr-defined]
        installer.replace(adapter, "slice_inputs", slice_inputs)

    def count(self) -> int:
        return self._count


def _on_cpu(device: Any) -> bool:
    """Whether a device name (``/device:CPU:0``, ``/job:localhost/…/device:CPU:0``, ``/cpu:0``)
    names the CPU; an empty one (placement left to TF: the GPU, on a GPU build) does not."""
    if type(device) is not str:
        return False
    for part in device.upper().split("/"):
        if part.startswith(("DEVICE:CPU", "CPU:")) or part == "CPU":
            return True
    return False


class UnsafeFFTs(Probe):
    """NVIDIA 76: FFT ops built on the unsafe build and not pinned to the CPU (where cuFFT would
    run them). The op types are the FFT guard's (``FAMILY``); the probe watches the ops, not the
    functions, so every binding (``tf.signal.rfft``, ``tf.raw_ops.RFFT``, ``dct``, gradients) is
    seen and the guard's own bindings are left alone. Eager ops: the device asked for when the op
    runs; graph ops (a Session's, a tf.function's): the device the op was given. With the guard's
    ``cpu`` mode on, whichever was installed first, both name the CPU; in ``error`` mode no op is
    built."""

    patch = "rfft_guard"
    watches_eager_ops = True

    def __init__(self) -> None:
        self._count = 0

    def install(self, installer: Installer, executor: "EagerExecutions") -> None:
        from ..patches.rfft_guard import FAMILY

        types = frozenset(name.upper() for name in FAMILY)

        def eager(args: tuple) -> None:
            if not _on_cpu(getattr(args[0], "device_name", None)):
                self._count += 1

        for op in types:
            executor.watch(op, eager)

        graph_class = tf_module("python.framework.ops").Graph
        original = graph_class._create_op_internal

        def _create_op_internal(graph: Any, op_type: Any, *args: Any, **kwargs: Any) -> Any:
            op = original(graph, op_type, *args, **kwargs)
            if op_type in types and installer.active and not _on_cpu(getattr(op, "device", None)):
                self._count += 1
            return op

        _create_op_internal.__wrapped__ = original  # type: ignore[attr-defined]
        installer.replace(graph_class, "_create_op_internal", _create_op_internal)

    def count(self) -> int:
        return self._count


class EagerTensors(Probe):
    """The py311 advisory's unit: eager tensors made (by ops or conversions alike), read from TF's
    own unique-id counter, which every ``EagerTensor`` takes one from (graph tensors do too, a few
    per traced op: the count is an upper bound). Nothing on the hot path."""

    patch = "py311_eager_op_leak"

    def __init__(self) -> None:
        self._uid: Optional[Callable[[], int]] = None
        self._start = 0
        self._reads = 0
        self._lock = threading.Lock()

    def install(self, installer: Installer, executor: EagerExecutions) -> None:
        uid = tf_module("python.framework.ops").uid
        self._start = uid()
        self._uid = uid

    def count(self) -> int:
        if self._uid is None:
            return 0
        with self._lock:
            self._reads += 1  # each read takes an id itself
            return max(0, self._uid() - self._start - self._reads)


PROBES: Tuple[type, ...] = (FreshSeedKernels, GraphGrowth, FreshPyFuncTokens, KeptGenerators,
                            KeptCustomGradients, KerasPipelines, UnsafeFFTs, EagerTensors)
