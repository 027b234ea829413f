"""Eager random ops under a global seed draw stock TensorFlow's numbers without the kernel-cache leak.

TF issue 36164 (twin: 37252), never fixed upstream. With ``tf.random.set_seed(s)`` and no op seed,
``random_seed.get_seed`` gives every eager call a fresh ``(seed, seed2)`` pair; the stateful
kernel built for it stays in the eager kernel cache for good: ≈35 KiB and ≈1.9 ms more per call,
measured on TF 2.12–2.21 (docs/measurements.md). Still there on tf-nightly-cpu 2.22.0.dev20260905:
35,563 KiB per 1,000 seeded tf.random.uniform calls unpatched (scripts/canary.py).

The fix keeps TF's own op-seed sequence (stock ``get_seed`` still draws every pair, so re-seeding
and ordering behave as documented) and changes only which kernel computes the draw. A fresh
stateful kernel's first output is exactly what the stateless V2 op computes from
``key=[seed]``, ``counter=[0, seed2]``, Philox (``TWINS`` below, checked bit for bit on TF 2.12
and 2.21 for every dtype those ops take). Key and counter are tensor inputs, so one cached kernel
per op and dtype serves every draw. Ops without such a twin (``TWINLESS``) get one op seed per
kind instead (global seed, op, input dtypes, attribute values: what the kernel cache keys on), so
one cached kernel serves a kind and its stream continues from draw to draw: no leak, reproducible
whatever the source text, but values that differ from stock's (the report says which).

Upstream code this patch follows (pinned, to diff against a new release):
https://github.com/tensorflow/tensorflow/blob/v2.21.0/tensorflow/python/framework/random_seed.py
(``get_seed``) and the ``gen_random_ops`` / ``gen_stateless_random_ops_v2`` wrappers generated
from ``tensorflow/core/ops/random_ops.cc`` and ``stateless_random_ops_v2.cc``.
"""

from __future__ import annotations

import hashlib  # at the top, as every import: none happens after apply_all() loads (issue 39)
import inspect
import threading
from array import array
from inspect import CO_VARARGS, CO_VARKEYWORDS
from types import FunctionType
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..core.canary import Finding, per_1000
from ..core.context import PatchContext, tf_module
from ..core.gate import Gate
from ..core.units import KIB
from ..core.options import Option, choice
from ..core.patch import Patch
from ..core.signature import EagerExecutions, Installer, Probe, Signature, attribute_after, by_minor

NAME = "seed_kernel_cache"
_MODES = ("twins", "exact")
_OPTIONS = (
    Option(NAME, "TF_PATCHES_SEED_KERNEL_CACHE", choice(*_MODES), "twins",
           "twins (default): stock TF's numbers from stateless twin ops, no kernel kept per draw; "
           "exact: the same, and stock's numbers also where stock repeats a seed pair (≈2.3 % of "
           "global seeds within 10,000 draws of one op), at ≤ 16 bytes per fresh pair, kept until "
           "the next tf.random.set_seed, and ≈1 µs per draw."),
)

# Stateful op -> its stateless twin: (gen module, function, op, twin op, twin's function in
# gen_stateless_random_ops_v2). The twin takes the stateful op's first tensor input (shape or
# value), then key, counter and alg, then the other inputs.
TWINS: Tuple[Tuple[str, str, str, str, str], ...] = (
    ("gen_random_ops", "random_uniform", "RandomUniform", "StatelessRandomUniformV2",
     "stateless_random_uniform_v2"),
    ("gen_random_ops", "random_standard_normal", "RandomStandardNormal", "StatelessRandomNormalV2",
     "stateless_random_normal_v2"),
    ("gen_random_ops", "truncated_normal", "TruncatedNormal", "StatelessTruncatedNormalV2",
     "stateless_truncated_normal_v2"),
    ("gen_random_ops", "random_uniform_int", "RandomUniformInt", "StatelessRandomUniformIntV2",
     "stateless_random_uniform_int_v2"),
    ("gen_random_ops", "random_shuffle", "RandomShuffle", "StatelessShuffle", "stateless_shuffle"),
)
# Ops that TF's Python feeds a get_seed() pair and that have no key/counter twin (their stateless
# ops derive other bits, or none exists): a stable op seed per use, values differ from stock.
TWINLESS: Tuple[Tuple[str, str, str], ...] = (
    ("gen_random_ops", "multinomial", "Multinomial"),
    ("gen_random_ops", "random_gamma", "RandomGamma"),
    ("gen_random_ops", "random_poisson_v2", "RandomPoissonV2"),
    ("gen_random_ops", "parameterized_truncated_normal", "ParameterizedTruncatedNormal"),
    ("gen_candidate_sampling_ops", "uniform_candidate_sampler", "UniformCandidateSampler"),
    ("gen_candidate_sampling_ops", "log_uniform_candidate_sampler", "LogUniformCandidateSampler"),
    ("gen_candidate_sampling_ops", "learned_unigram_candidate_sampler", "LearnedUnigramCandidateSampler"),
    ("gen_candidate_sampling_ops", "fixed_unigram_candidate_sampler", "FixedUnigramCandidateSampler"),
    ("gen_candidate_sampling_ops", "all_candidate_sampler", "AllCandidateSampler"),
    ("gen_candidate_sampling_ops", "compute_accidental_hits", "ComputeAccidentalHits"),
    ("gen_data_flow_ops", "random_shuffle_queue_v2", "RandomShuffleQueueV2"),
)
# Ops with int seed/seed2 attributes that TF's own Python never feeds a fresh get_seed() pair
# (GPU RNNs are given seed 0 by Keras; fractional pooling and sample_distorted_bounding_box call
# get_seed only for a seed the user gave; the rest are legacy graph-only ops). A test keeps this
# list complete.
NOT_FED = ("FractionalAvgPool", "FractionalMaxPool", "SampleDistortedBoundingBox", "SampleDistortedBoundingBoxV2",
           "CudnnRNN", "CudnnRNNBackprop", "CudnnRNNBackpropV2", "CudnnRNNBackpropV3",
           "CudnnRNNCanonicalToParams", "CudnnRNNCanonicalToParamsV2", "CudnnRNNParamsSize",
           "CudnnRNNParamsToCanonical", "CudnnRNNParamsToCanonicalV2", "CudnnRNNV2", "CudnnRNNV3",
           "RandomCrop", "RandomPoisson", "RandomShuffleQueue", "SnapshotDataset",
           "ThreadUnsafeUnigramCandidateSampler")

_PHILOX = 1  # the RNG algorithm id of the stateful kernels (random::PhiloxRandom)
_MAX_CACHED = 100_000  # kinds remembered by the twin-less path; cleared past this
_MAX_KEYS = 1_024  # key tensors kept (one per global seed in use); cleared past this
_MAXINT31 = 0x7FFFFFFF


class _Note(threading.local):
    """The fresh pair stock ``get_seed`` just handed out in this thread, until an op takes it."""

    pair: Optional[Tuple[int, int]] = None


class _Router:
    """Decides, per random-op call, whether its seeds are a fresh eager pair, and builds the
    twin's key/counter/alg tensors. The hot path is a thread-local read and two ``is`` tests."""

    def __init__(self, patch: PatchContext, context: Any, eager_tensor: type, uint64: int, int32: int):
        self.note = _Note()
        self._patch = patch  # its ``active`` turns False at revert: wrappers user code kept pass through
        self._context = context
        self.eager_tensor = eager_tensor
        self._uint64, self._int32 = uint64, int32
        self._ctx: Any = None  # the eager context the cached tensors belong to
        self._host = ""  # its host CPU: tensors named for it are built without a device search
        self._keys: Dict[int, Any] = {}
        self._alg: Any = None

    def take(self, seed: Any, seed2: Any) -> Any:
        """The eager context if ``(seed, seed2)`` is the pair this thread's ``get_seed`` just drew
        (the very objects, so explicit seeds of equal value never match), else None."""
        note = self.note
        pair = note.pair
        if pair is None:
            return None
        note.pair = None
        if seed2 is not pair[1] or seed is not pair[0] or not self._patch.active:
            return None
        ctx = self._context._context
        if ctx is None or not ctx._thread_local_data.is_eager:
            return None
        return ctx

    def tensors(self, ctx: Any, seed: int, seed2: int, blocks: int = 0) -> Tuple[Any, Any, Any]:
        """key=[seed], counter=[blocks, seed2] (uint64) and alg (int32), on the host: the twin's
        inputs (``blocks``: what the pair's stateful kernel reserved before, in exact mode). The
        key and alg are cached per context; the counter is new for every draw."""
        if ctx is not self._ctx:
            self._ctx, self._keys = ctx, {}
            self._host = ctx.host_address_space() + "/device:CPU:0"
            self._alg = self.eager_tensor(_PHILOX, self._host, self._int32)
        key = self._keys.get(seed)
        if key is None:
            if len(self._keys) >= _MAX_KEYS:
                self._keys.clear()
            key = self._keys[seed] = self.eager_tensor([seed], self._host, self._uint64)
        # ≈5 µs; with an empty device name EagerTensor searches for the device (≈14 µs).
        return key, self.eager_tensor([blocks, seed2], self._host, self._uint64), self._alg


class PairTable:
    """``seed_kernel_cache="exact"``: what the stateful kernel of each fresh pair of the current
    global seed would have consumed, so that a repeated pair continues its stream as stock's cached
    kernel does. One 64-bit word per pair, in an open-addressing table kept between 1/2 and 3/4
    full (11–16 bytes per pair): the pair's key (seed2 and the op kind: 40 bits) and the units
    drawn so far (24 bits; past 16.7 million the pair is no longer exact). Cleared when
    ``tf.random.set_seed`` replaces the context's op-seed generator, as it clears TF's kernel cache.
    Locked: draws from several threads count every pair. Growing rehashes from the old array into
    the new (≈27 bytes per pair at that moment), in Python: the draw that grows it waits (0.43 s
    at 10⁶ pairs, measured on the 2-core test machine; well under 1 µs per pair amortised)."""

    _KEY_BITS = 40
    _KEY_MASK = (1 << 40) - 1
    _MAX_UNITS = (1 << 24) - 1
    _FIRST_SIZE = 1_024

    def __init__(self) -> None:
        self._epoch: Any = None
        self._lock = threading.Lock()
        self._reset(self._FIRST_SIZE)

    def _reset(self, size: int) -> None:
        self._slots = array("Q", (0,)) * size  # no temporary of the same size
        self._used = 0

    def _home(self, key: int) -> int:
        return ((key * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF) % len(self._slots)

    def advance(self, epoch: Any, kind: int, seed2: int, units: int) -> Optional[int]:
        """The units this pair drew before (0 for a fresh pair), ``units`` added; None where the
        count overflowed (the draw can no longer be exact)."""
        with self._lock:
            return self._advance(epoch, kind, seed2, units)

    def _advance(self, epoch: Any, kind: int, seed2: int, units: int) -> Optional[int]:
        if epoch is not self._epoch:
            self._epoch = epoch
            self._reset(self._FIRST_SIZE)
        key = ((seed2 << 8) | kind) + 1  # never 0, the empty slot
        slots = self._slots
        size = len(slots)
        index = self._home(key)
        while True:
            word = slots[index]
            if word == 0:
                break
            if word & self._KEY_MASK == key:
                before = word >> self._KEY_BITS
                if before + units > self._MAX_UNITS:
                    slots[index] = key | (self._MAX_UNITS << self._KEY_BITS)
                    return None
                slots[index] = key | ((before + units) << self._KEY_BITS)
                return before
            index = index + 1 if index + 1 < size else 0
        if (self._used + 1) * 4 > size * 3:  # past 3/4 full: grow by half, to 1/2 full
            self._grow()
            return self._advance(epoch, kind, seed2, units)
        slots[index] = key | (min(units, self._MAX_UNITS) << self._KEY_BITS)
        self._used += 1
        return 0

    def _grow(self) -> None:
        old, used = self._slots, self._used  # read word by word: no Python int kept per pair
        self._reset(len(old) * 3 // 2)
        slots, size = self._slots, len(self._slots)
        for word in old:
            if word:
                index = self._home(word & self._KEY_MASK)
                while slots[index]:
                    index = index + 1 if index + 1 < size else 0
                slots[index] = word
        self._used = used

    def clear(self) -> None:
        with self._lock:
            self._epoch = None
            self._reset(self._FIRST_SIZE)


# How much of its Philox stream a stateful kernel reserves per call, per op (TF's kernels):
# PhiloxRandomOp and RandomUniformIntOp ReserveRandomOutputs(elements, 256) 128-bit blocks;
# RandomShuffle ReserveSamples32(rows - 1), i.e. ceil((rows - 1) / 4) blocks (none for a single
# row or element). (units per call, blocks per unit)
def _elements(shape: Any) -> int:
    values = shape.numpy() if hasattr(shape, "numpy") else shape
    count = 1
    for value in (values.ravel().tolist() if hasattr(values, "ravel") else list(values)):
        count *= int(value)
    return count


def _shuffled_blocks(value: Any) -> int:
    shape = tuple(getattr(value, "shape", None) or _shape_of(value))
    elements = 1
    for size in shape:
        elements *= int(size)
    if not shape or elements <= 1 or shape[0] <= 1:
        return 0
    return (int(shape[0]) - 1 + 3) // 4


def _shape_of(value: Any) -> Tuple[int, ...]:
    import numpy as np

    return np.shape(value)


_CONSUMPTION: Dict[str, Tuple[Callable[[Any], int], int]] = {
    "RandomUniform": (_elements, 256),
    "RandomStandardNormal": (_elements, 256),
    "TruncatedNormal": (_elements, 256),
    "RandomUniformInt": (_elements, 256),
    "RandomShuffle": (_shuffled_blocks, 1),
}


def _dtype_code(value: Any) -> int:
    """The dtype part of a kernel's kind (0–31): the enum of a DType, or a tensor's dtype."""
    dtype = getattr(value, "dtype", value)
    enum = getattr(dtype, "as_datatype_enum", dtype)
    return enum % 32 if isinstance(enum, int) else 0


def _exact_tensors(router: "_Router", table: PairTable, op: str) -> Callable[..., Tuple[Any, Any, Any]]:
    """The ``tensors`` of an exact-mode twin wrapper: the counter starts where stock's kernel for
    this pair would be: [blocks it reserved before, seed2]."""
    units_of, blocks_per_unit = _CONSUMPTION[op]
    op_code = sorted(_CONSUMPTION).index(op) * 32

    def tensors(ctx: Any, seed: int, seed2: int, first: Any, kind_source: Any) -> Tuple[Any, Any, Any]:
        before = table.advance(ctx._rng, op_code + _dtype_code(kind_source), seed2, units_of(first))
        return router.tensors(ctx, seed, seed2, (before or 0) * blocks_per_unit)

    return tensors


def _noting_get_seed(original_get_seed: Callable, context: Any, note: _Note, ctx: Any) -> Callable:
    """Stock ``get_seed``, noting in ``note`` the fresh pair it hands out (while ``ctx.active``).
    The patch's router and ``tf-patches diagnose`` (which counts fresh pairs that reach a
    stateful kernel) read the same note."""

    def get_seed(op_seed):
        if not ctx.active:  # reverted (a reference kept elsewhere): stock's, nothing noted
            return original_get_seed(op_seed)
        seeds_ = original_get_seed(op_seed)
        # Stock drew a fresh pair exactly when eager, globally seeded and no op seed was given.
        # Any other call clears the note, so a pair never waits for a later op to take it.
        if op_seed is None and seeds_[0] is not None:
            eager = context._context  # what TF's generated op wrappers read, cheaper than executing_eagerly()
            note.pair = seeds_ if eager is not None and eager._thread_local_data.is_eager else None
        else:
            note.pair = None
        return seeds_

    return get_seed


_STATEFUL_OPS = frozenset(op for *_, op, _twin, _fn in TWINS) | frozenset(op for *_, op in TWINLESS)

# The wrappers of the twin-served ops, one per argument list of TF's generated op wrappers (before
# seed, seed2, name). Each is written out, not generated: explicit parameters keep the hot path
# free of *args packing (a draw costs ≈20 µs). The pass-through comes first (reverted: exactly
# the original, for references user code kept); anything unusual in the twin's call falls back to
# stock's op, with stock's errors. ``tensors`` takes the draw's first argument and the one whose
# dtype is the kernel's in exact mode (:func:`_exact_tensors`), and only the pair otherwise.


def _shape_dtype_wrapper(original: Callable, twin: str, twin_fn: Callable, take: Callable, tensors: Callable,
                         exact: bool, execute: Callable, eager_tensor: type, patch: PatchContext) -> Callable:
    """RandomUniform, RandomStandardNormal, TruncatedNormal: ``(shape, dtype)``."""

    def wrapper(shape, dtype, seed=0, seed2=0, name=None):
        if not patch.active:
            return original(shape, dtype, seed, seed2, name)
        ctx = take(seed, seed2)
        if ctx is not None:
            key, counter, alg = tensors(ctx, seed, seed2, shape, dtype) if exact else tensors(ctx, seed, seed2)
            try:
                if type(shape) is eager_tensor:  # TF's own callers: straight to the fast path
                    return execute(ctx, twin, name, shape, key, counter, alg, "dtype", dtype)
                return twin_fn(shape, key, counter, alg, dtype=dtype, name=name)
            except Exception:
                pass
        return original(shape, dtype, seed, seed2, name)

    return wrapper


def _shape_bounds_wrapper(original: Callable, twin: str, twin_fn: Callable, take: Callable, tensors: Callable,
                          exact: bool, execute: Callable, eager_tensor: type, patch: PatchContext) -> Callable:
    """RandomUniformInt: ``(shape, minval, maxval)``; the kernel's dtype is minval's."""

    def wrapper(shape, minval, maxval, seed=0, seed2=0, name=None):
        if not patch.active:
            return original(shape, minval, maxval, seed, seed2, name)
        ctx = take(seed, seed2)
        if ctx is not None:
            key, counter, alg = tensors(ctx, seed, seed2, shape, minval) if exact else tensors(ctx, seed, seed2)
            try:
                if type(shape) is eager_tensor:
                    return execute(ctx, twin, name, shape, key, counter, alg, minval, maxval)
                return twin_fn(shape, key, counter, alg, minval, maxval, name=name)
            except Exception:
                pass
        return original(shape, minval, maxval, seed, seed2, name)

    return wrapper


def _value_wrapper(original: Callable, twin: str, twin_fn: Callable, take: Callable, tensors: Callable,
                   exact: bool, execute: Callable, eager_tensor: type, patch: PatchContext) -> Callable:
    """RandomShuffle: ``(value)``; the twin converts a non-tensor value as stock's op does."""

    def wrapper(value, seed=0, seed2=0, name=None):
        if not patch.active:
            return original(value, seed, seed2, name)
        ctx = take(seed, seed2)
        if ctx is not None:
            key, counter, alg = tensors(ctx, seed, seed2, value, value) if exact else tensors(ctx, seed, seed2)
            try:
                if type(value) is eager_tensor:
                    return execute(ctx, twin, name, value, key, counter, alg)
                return twin_fn(value, key, counter, alg, name=name)
            except Exception:
                pass
        return original(value, seed, seed2, name)

    return wrapper


_TWIN_WRAPPERS: Dict[str, Callable[..., Callable]] = {
    "RandomUniform": _shape_dtype_wrapper,
    "RandomStandardNormal": _shape_dtype_wrapper,
    "TruncatedNormal": _shape_dtype_wrapper,
    "RandomUniformInt": _shape_bounds_wrapper,
    "RandomShuffle": _value_wrapper,
}


def twin_wrapper(op: str, original: Callable, twin: str, twin_fn: Callable, router: _Router,
                 execute: Callable, patch: PatchContext, table: Optional[PairTable] = None) -> Callable:
    """The wrapper that serves ``op``'s fresh eager pairs through its stateless ``twin`` (counting
    each pair's draws in ``table``, in exact mode)."""
    exact = table is not None
    tensors = _exact_tensors(router, table, op) if exact else router.tensors
    return _TWIN_WRAPPERS[op](original, twin, twin_fn, router.take, tensors, exact, execute,
                              router.eager_tensor, patch)


class _KindSeeds:
    """The twin-less ops' op seed: one per (global seed, op, and what else the eager kernel cache
    keys the call on: its inputs' dtypes and its attributes' values). Every fresh pair of that kind
    gets the same seed2, so one cached kernel serves them all and its stateful stream continues
    from draw to draw: values depend on the global seed and the order of that kind's draws, never
    on files, functions or lines. ``tf.random.set_seed`` clears TF's kernel cache and so restarts
    every stream, as it restarts stock's op-seed sequence. Two kinds never share a seed2."""

    def __init__(self, op: str, parameters: Tuple[str, ...], attributes: frozenset):
        self._op = op
        self._parameters = parameters  # the generated wrapper's argument names, in order
        self._attributes = attributes  # which of them are op attributes (the others are inputs)
        self._seeds: Dict[tuple, int] = {}

    def seed2(self, global_seed: int, args: tuple, kwargs: Dict[str, Any]) -> int:
        parts: List[Any] = [global_seed]
        for name, value in (*zip(self._parameters, args), *kwargs.items()):
            if name in ("seed", "seed2", "name"):
                continue
            if name in self._attributes:  # a dtype attribute by name, any other by value
                dtype_name = getattr(value, "name", None) if hasattr(value, "as_datatype_enum") else None
                parts.append((name, dtype_name or repr(value)))
            else:
                dtype = getattr(value, "dtype", None)
                parts.append((name, getattr(dtype, "name", None) or type(value).__name__))
        key = tuple(parts)
        seed = self._seeds.get(key)
        if seed is None:
            if len(self._seeds) >= _MAX_CACHED:
                self._seeds.clear()
            seed = self._seeds[key] = _derive(self._op, key)
        return seed

    def clear(self) -> None:
        self._seeds.clear()


def _derive(op: str, key: tuple) -> int:
    """A 31-bit seed2 from the kind's description: the same in every process and on every
    Python (repr of ints, strings and dtype names; never ids or Python's salted hash)."""
    digest = hashlib.blake2b(repr((op, key)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (_MAXINT31 - 1) + 1  # never 0: (0, 0) means "unseeded"


def _twinless_wrapper(original: Callable, router: _Router, seeds: _KindSeeds, patch: PatchContext) -> Callable:
    def wrapper(*args, **kwargs):
        if not patch.active:
            return original(*args, **kwargs)
        seed2 = kwargs.get("seed2")
        if seed2 is not None and router.take(kwargs.get("seed"), seed2) is not None:
            kwargs["seed2"] = seeds.seed2(int(kwargs["seed"]), args, kwargs)
        return original(*args, **kwargs)

    return wrapper


def _parameter_names(function: Callable) -> Tuple[str, ...]:
    """``tuple(inspect.signature(function, follow_wrapped=False).parameters)``. A generated op
    wrapper is a plain function with neither ``*args``, ``**kwargs`` nor ``__signature__``: its
    names are the first of its code's variables, read there (inspect takes ≈40 µs a function, 0.45
    ms for the eleven twin-less ops at apply_all, issue 38); anything else goes through inspect."""
    code = getattr(function, "__code__", None)
    if (type(function) is not FunctionType or code is None or code.co_flags & (CO_VARARGS | CO_VARKEYWORDS)
            or getattr(function, "__signature__", None) is not None):
        return tuple(inspect.signature(function, follow_wrapped=False).parameters)
    return code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]


def _kind_seeds(op: str, original: Callable) -> _KindSeeds:
    """The _KindSeeds of ``op``: its wrapper's parameter names and which are attributes (op def)."""
    parameters = _parameter_names(original)
    try:
        op_def = tf_module("python.framework.op_def_registry").get(op)
        attributes = frozenset(attr.name for attr in op_def.attr)
    except Exception:  # no op def to read: every argument counts as an attribute (finer kinds)
        attributes = frozenset(parameters)
    return _KindSeeds(op, parameters, attributes)


def _registered(op_names: Tuple[str, ...]) -> Dict[str, bool]:
    """Which of these ops this TF build has (a twin op added later than 2.0 may be missing)."""
    op_def_registry = tf_module("python.framework.op_def_registry")
    found = {}
    for op in op_names:
        try:
            found[op] = op_def_registry.get(op) is not None
        except Exception:  # an unknown op raises on some versions, returns None on others
            found[op] = False
    return found


def install(ctx: PatchContext) -> str:
    random_seed = tf_module("python.framework.random_seed")
    context = tf_module("python.eager.context")
    dtypes = tf_module("python.framework.dtypes")
    ops = tf_module("python.framework.ops")
    pywrap_tfe = tf_module("python.pywrap_tfe")
    router = _Router(ctx, context, ops.EagerTensor, dtypes.uint64.as_datatype_enum,
                    dtypes.int32.as_datatype_enum)
    execute = pywrap_tfe.TFE_Py_FastPathExecute
    exact = ctx.options.get(NAME) == "exact"
    table = PairTable() if exact else None
    if table is not None:
        ctx.on_revert("exact mode's pair table", table.clear)
    twin_ops = _registered(tuple(twin for _, _, _, twin, _ in TWINS))
    stateless = tf_module("python.ops.gen_stateless_random_ops_v2")

    served, fallback = [], []
    targets = [(module_name, function, op, twin, twin_function) for module_name, function, op, twin, twin_function in TWINS]
    targets += [(module_name, function, op, None, None) for module_name, function, op in TWINLESS]
    for module_name, function, op, twin, twin_function in targets:
        module = tf_module(f"python.ops.{module_name}")
        original = getattr(module, function, None)
        if original is None:  # not in this version: nothing to leak through
            continue
        twin_fn = getattr(stateless, twin_function, None) if twin else None
        if twin_fn is not None and twin_ops[twin]:
            wrapper = twin_wrapper(op, original, twin, twin_fn, router, execute, ctx, table)
            served.append(op)
        else:  # no twin, or this TF lacks it: one kernel per kind keeps the loop from leaking
            seeds = _kind_seeds(op, original)
            ctx.on_revert(f"{op} kind seeds", seeds.clear)
            wrapper = _twinless_wrapper(original, router, seeds, ctx)
            fallback.append(op)
        ctx.replace_attribute(module, function, wrapper)

    # Only the module attribute, which TF's own ops look up at each call: the names bound at
    # import (tf.random.get_seed, tf.compat.v1.get_seed) keep stock's function, as they should.
    ctx.replace_attribute(random_seed, "get_seed", _noting_get_seed(random_seed.get_seed, context, router.note, ctx))
    return (
        f"stock values through stateless twins for {', '.join(served)}"
        + (" (exact: a repeated seed pair continues its stream, as stock's)" if exact else "") + "; "
        f"one op seed per kind (global seed, op, dtypes, attributes: values differ from stock) for "
        f"{', '.join(fallback)}; kernels leaked before install stay until the next tf.random.set_seed"
    )


# --- diagnose: the live signature ---------------------------------------------------------------
_SIGNATURE = Signature(
    unit="fresh stateful random kernels (eager random ops under a global seed, no op seed; "
         "the most the kernel cache held at once)",
    # docs/measurements.md, "The eager seed leak (TF 36164)": 35,576 KiB per 1,000 calls on
    # 2.21.0, 37,993 on 2.12.1.
    unit_bytes=by_minor({"2.12": 37_993 * KIB // 1000}, 35_576 * KIB // 1000), floor=256,
    fix="stock numbers through stateless twins, no kernel per draw",
    name='a new random-op kernel kept per draw (global seed set, no op seed)',
    code_fix=('give each random op its own seed (`tf.random.uniform(shape, seed=7)`), or draw with '
              '`tf.random.stateless_uniform(shape, seed=[s, step])` or a `tf.random.Generator`'),
    upstream_fix='open upstream since 2020 (TF 36164): no TensorFlow release fixes it')


class FreshSeedKernels(Probe):
    """A fresh ``(seed, seed2)`` pair from ``get_seed`` reaching a stateful random op's eager
    kernel (the patch's own note; with the patch on, the pair goes to a stateless twin).
    ``tf.random.set_seed`` (and ``clear_kernel_cache``) empties TF's kernel cache: the count is the
    most fresh kernels the cache held at once, which is what RSS keeps (freed kernels' memory is
    reused, not returned), so a loop that re-seeds before a few draws does not read as a leak."""

    watches_eager_ops = True

    def __init__(self) -> None:
        self._live = 0  # fresh kernels since the cache was last cleared
        self._peak = 0

    def install(self, installer: Installer, executor: EagerExecutions) -> None:
        random_seed = tf_module("python.framework.random_seed")
        context = tf_module("python.eager.context")
        pywrap_tfe = tf_module("python.pywrap_tfe")
        note = _Note()
        get_seed = _noting_get_seed(random_seed.get_seed, context, note, installer)
        get_seed.__wrapped__ = random_seed.get_seed  # type: ignore[attr-defined]
        clear_caches = pywrap_tfe.TFE_ContextClearCaches
        sites = self.sites

        def stateful(args: tuple) -> None:
            pair = note.pair
            if pair is None:
                return
            if attribute_after(args, "seed2") is pair[1] and attribute_after(args, "seed") is pair[0]:
                note.pair = None
                live = self._live = self._live + 1
                if live > self._peak:
                    self._peak = live
                sites.hit()

        def cleared(*args: Any) -> Any:
            # What set_seed and clear_kernel_cache call (looked up at call time in both).
            self._live = 0
            return clear_caches(*args)

        cleared.__wrapped__ = clear_caches  # type: ignore[attr-defined]
        installer.replace(random_seed, "get_seed", get_seed)
        installer.replace(pywrap_tfe, "TFE_ContextClearCaches", cleared)
        for op in _STATEFUL_OPS:
            executor.watch(op, stateful)

    def count(self) -> int:
        return self._peak


# --- canary: is the bug still upstream? ---------------------------------------------------------
def canary() -> Finding:
    import tensorflow as tf

    tf.random.set_seed(1234)  # ≈35,000 KiB per 1,000 calls on 2.12–2.21, 0.3 with an op seed
    kib = per_1000(lambda: tf.random.uniform([]).numpy(), 2000, 200)
    return Finding(kib > 1000, f"{kib:,.0f} KiB per 1,000 seeded tf.random.uniform calls")


# --- the declaration (core/patch.py) -------------------------------------------------------------
PATCH = Patch(
    name=NAME,
    title="Stock numbers without the kernel-cache leak of eager random ops under a global seed",
    issue="https://github.com/tensorflow/tensorflow/issues/36164",
    gate=Gate(versions=">=2.0"),  # present in every 2.x release measured (2.12–2.21); no fix upstream
    options=_OPTIONS,
    install=install,
    signature=_SIGNATURE,
    probe=FreshSeedKernels,
    canary=canary,
)
