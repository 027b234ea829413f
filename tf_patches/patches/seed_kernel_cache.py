"""Eager random ops under a global seed draw stock TensorFlow's numbers without the kernel-cache leak.

TF issue 36164 (twin: 37252), never fixed upstream. With ``tf.random.set_seed(s)`` and no op seed,
``random_seed.get_seed`` gives every eager call a fresh ``(seed, seed2)`` pair; the stateful
kernel built for it stays in the eager kernel cache for good: ≈35 KiB and ≈1.9 ms more per call,
measured on TF 2.12–2.21 (shared/FINDINGS.md). Still there on tf-nightly-cpu 2.22.0.dev20260905:
35,563 KiB per 1,000 seeded tf.random.uniform calls unpatched (scripts/canary.py).

The fix keeps TF's own op-seed sequence (stock ``get_seed`` still draws every pair, so re-seeding
and ordering behave as documented) and changes only which kernel computes the draw. A fresh
stateful kernel's first output is exactly what the stateless V2 op computes from
``key=[seed]``, ``counter=[0, seed2]``, Philox (``TWINS`` below, checked bit for bit on TF 2.12
and 2.21 for every dtype those ops take). Key and counter are tensor inputs, so one cached kernel
per op and dtype serves every draw. Ops without such a twin (``TWINLESS``) get a stable op seed per
use instead: no leak, reproducible, but values that differ from stock's (the report says which).

Upstream code this patch follows (pinned, to diff against a new release):
https://github.com/tensorflow/tensorflow/blob/v2.21.0/tensorflow/python/framework/random_seed.py
(``get_seed``) and the ``gen_random_ops`` / ``gen_stateless_random_ops_v2`` wrappers generated
from ``tensorflow/core/ops/random_ops.cc`` and ``stateless_random_ops_v2.cc``.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..core.context import PatchContext, tf_module
from ..core.frames import CodeClassifier, package_dirs
from ..core.gate import Gate

NAME = "seed_kernel_cache"
TITLE = "Stock numbers without the kernel-cache leak of eager random ops under a global seed"
ISSUE_URL = "https://github.com/tensorflow/tensorflow/issues/36164"
GATE = Gate(versions=">=2.0")  # present in every 2.x release measured (2.12–2.21); no fix upstream

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

PHILOX = 1  # the RNG algorithm id of the stateful kernels (random::PhiloxRandom)
_MAX_DEPTH = 64  # frames walked at most by the twin-less fallback, a bound for deep recursion
_MAX_CACHED = 100_000  # call paths remembered by the fallback; cleared past this
_MAX_KEYS = 1_024  # key tensors kept (one per global seed in use); cleared past this
_MAXINT31 = 0x7FFFFFFF


class _Note(threading.local):
    """The fresh pair stock ``get_seed`` just handed out in this thread, until an op takes it."""

    pair: Optional[Tuple[int, int]] = None


class Router:
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

    def tensors(self, ctx: Any, seed: int, seed2: int) -> Tuple[Any, Any, Any]:
        """key=[seed], counter=[0, seed2] (uint64) and alg (int32), on the host: the twin's
        inputs. The key and alg are cached per context; the counter is new for every draw."""
        if ctx is not self._ctx:
            self._ctx, self._keys = ctx, {}
            self._host = ctx.host_address_space() + "/device:CPU:0"
            self._alg = self.eager_tensor(PHILOX, self._host, self._int32)
        key = self._keys.get(seed)
        if key is None:
            if len(self._keys) >= _MAX_KEYS:
                self._keys.clear()
            key = self._keys[seed] = self.eager_tensor([seed], self._host, self._uint64)
        # ≈5 µs; with an empty device name EagerTensor searches for the device (≈14 µs).
        return key, self.eager_tensor([0, seed2], self._host, self._uint64), self._alg


def noting_get_seed(original_get_seed: Callable, context: Any, note: _Note, ctx: Any) -> Callable:
    """Stock ``get_seed``, noting in ``note`` the fresh pair it hands out (while ``ctx.active``).
    The patch's router and ``tf-patches diagnose`` (which counts fresh pairs that reach a
    stateful kernel) read the same note."""

    def get_seed(op_seed):
        seeds_ = original_get_seed(op_seed)
        # Stock drew a fresh pair exactly when eager, globally seeded and no op seed was given.
        # Any other call clears the note, so a pair never waits for a later op to take it.
        if op_seed is None and seeds_[0] is not None and ctx.active:
            eager = context._context  # what TF's generated op wrappers read, cheaper than executing_eagerly()
            note.pair = seeds_ if eager is not None and eager._thread_local_data.is_eager else None
        else:
            note.pair = None
        return seeds_

    return get_seed


STATEFUL_OPS = frozenset(op for *_, op, _twin, _fn in TWINS) | frozenset(op for *_, op in TWINLESS)


def _shape_op_wrapper(original: Callable, twin: str, twin_fn: Callable, router: Router,
                      execute: Callable) -> Callable:
    """``f(shape, dtype, seed, seed2, name)`` ops: uniform, standard normal, truncated normal."""
    eager_tensor = router.eager_tensor

    def wrapper(shape, dtype, seed=0, seed2=0, name=None):
        ctx = router.take(seed, seed2)
        if ctx is not None:
            key, counter, alg = router.tensors(ctx, seed, seed2)
            try:
                if type(shape) is eager_tensor:  # TF's own callers: straight to the fast path
                    return execute(ctx, twin, name, shape, key, counter, alg, "dtype", dtype)
                return twin_fn(shape, key, counter, alg, dtype=dtype, name=name)
            except Exception:  # anything unusual: stock's op, with stock's errors
                pass
        return original(shape, dtype, seed=seed, seed2=seed2, name=name)

    return wrapper


def _uniform_int_wrapper(original: Callable, twin: str, twin_fn: Callable, router: Router,
                         execute: Callable) -> Callable:
    eager_tensor = router.eager_tensor

    def wrapper(shape, minval, maxval, seed=0, seed2=0, name=None):
        ctx = router.take(seed, seed2)
        if ctx is not None:
            key, counter, alg = router.tensors(ctx, seed, seed2)
            try:
                if type(shape) is eager_tensor:
                    return execute(ctx, twin, name, shape, key, counter, alg, minval, maxval)
                return twin_fn(shape, key, counter, alg, minval, maxval, name=name)
            except Exception:
                pass
        return original(shape, minval, maxval, seed=seed, seed2=seed2, name=name)

    return wrapper


def _shuffle_wrapper(original: Callable, twin: str, twin_fn: Callable, router: Router,
                     execute: Callable) -> Callable:
    eager_tensor = router.eager_tensor

    def wrapper(value, seed=0, seed2=0, name=None):
        ctx = router.take(seed, seed2)
        if ctx is not None:
            key, counter, alg = router.tensors(ctx, seed, seed2)
            try:
                if type(value) is eager_tensor:
                    return execute(ctx, twin, name, value, key, counter, alg)
                return twin_fn(value, key, counter, alg, name=name)  # converts as stock's op does
            except Exception:
                pass
        return original(value, seed=seed, seed2=seed2, name=name)

    return wrapper


_TWIN_WRAPPERS = {
    "RandomUniform": _shape_op_wrapper,
    "RandomStandardNormal": _shape_op_wrapper,
    "TruncatedNormal": _shape_op_wrapper,
    "RandomUniformInt": _uniform_int_wrapper,
    "RandomShuffle": _shuffle_wrapper,
}


class StableSeeds:
    """The twin-less fallback: a stable op seed per use, keyed by the global seed's value, the op,
    the dtypes of its arguments and the call path (TF frames up to the user's line), so that two
    op kinds, two dtypes or two lines never share random bits. Reproducible in every process and
    checkout (file base names, function names and lines; never ids or Python's salted hash)."""

    def __init__(self, library_dirs: Tuple[str, ...]):
        self._frames = CodeClassifier(library_dirs)
        self._seeds: Dict[tuple, int] = {}

    def op_seed(self, global_seed: int, kind: Tuple[str, ...], frame: Any) -> int:
        known = self._frames.known
        path: List[Any] = [global_seed, kind]
        start, depth = frame, 0
        while frame is not None and depth < _MAX_DEPTH:
            code = frame.f_code
            library = known.get(id(code))
            if library is None:
                library = self._frames.classify(code)
            path.append(id(code))
            path.append(frame.f_lasti)  # not f_lineno: that decodes the line table on each read
            if not library:
                break
            frame = frame.f_back
            depth += 1
        key = tuple(path)
        seed = self._seeds.get(key)
        if seed is None:
            if len(self._seeds) >= _MAX_CACHED:
                self.clear()
            seed = self._seeds[key] = _derive(global_seed, kind, start, depth + 1)
        return seed

    def clear(self) -> None:
        self._seeds.clear()
        self._frames.clear()


def _derive(global_seed: int, kind: Tuple[str, ...], frame: Any, depth: int) -> int:
    parts = [str(global_seed), *kind]
    for _ in range(depth):
        if frame is None:
            break
        code = frame.f_code
        parts.append(f"{os.path.basename(code.co_filename)}:{code.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    digest = hashlib.blake2b("|".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (_MAXINT31 - 1) + 1  # never 0: (0, 0) means "unseeded"


def _dtype_names(args: tuple, kwargs: Dict[str, Any]) -> Tuple[str, ...]:
    """What the kernel cache keys a call on, besides the seeds: the dtypes of its arguments."""
    names = []
    for value in (*args, *kwargs.values()):
        dtype = getattr(value, "dtype", value)
        names.append(getattr(dtype, "name", type(value).__name__))
    return tuple(names)


def _twinless_wrapper(original: Callable, op: str, router: Router, seeds: StableSeeds) -> Callable:
    def wrapper(*args, **kwargs):
        seed2 = kwargs.get("seed2")
        if seed2 is not None and router.take(kwargs.get("seed"), seed2) is not None:
            rest = {k: v for k, v in kwargs.items() if k not in ("seed", "seed2", "name")}
            kind = (op, *_dtype_names(args, rest))
            kwargs["seed2"] = seeds.op_seed(int(kwargs["seed"]), kind, sys._getframe(1))
        return original(*args, **kwargs)

    return wrapper


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
    router = Router(ctx, context, ops.EagerTensor, dtypes.uint64.as_datatype_enum,
                    dtypes.int32.as_datatype_enum)
    seeds = StableSeeds(package_dirs())
    ctx.on_revert("stable seed cache", seeds.clear)
    execute = pywrap_tfe.TFE_Py_FastPathExecute
    twin_ops = _registered(tuple(twin for _, _, _, twin, _ in TWINS))
    stateless = tf_module("python.ops.gen_stateless_random_ops_v2")

    served, fallback = [], []
    for module_name, function, op, twin, twin_function in TWINS:
        module = tf_module(f"python.ops.{module_name}")
        original = getattr(module, function)
        twin_fn = getattr(stateless, twin_function, None)
        if twin_ops[twin] and twin_fn is not None:
            wrapper = _TWIN_WRAPPERS[op](original, twin, twin_fn, router, execute)
            served.append(op)
        else:  # this TF lacks the twin op: the fallback keeps the loop from leaking
            wrapper = _twinless_wrapper(original, op, router, seeds)
            fallback.append(op)
        ctx.replace_attribute(module, function, _dressed(wrapper, original))
    for module_name, function, op in TWINLESS:
        module = tf_module(f"python.ops.{module_name}")
        original = getattr(module, function, None)
        if original is None:  # not in this version: nothing to leak through
            continue
        ctx.replace_attribute(module, function, _dressed(_twinless_wrapper(original, op, router, seeds), original))
        fallback.append(op)

    original_get_seed = random_seed.get_seed
    get_seed = noting_get_seed(original_get_seed, context, router.note, ctx)

    # Only the module attribute, which TF's own ops look up at each call: the names bound at
    # import (tf.random.get_seed, tf.compat.v1.get_seed) keep stock's function, as they should.
    ctx.replace_attribute(random_seed, "get_seed", _dressed(get_seed, original_get_seed))
    return (
        f"stock values through stateless twins for {', '.join(served)}; "
        f"stable per-use op seeds (values differ from stock) for {', '.join(fallback)}; "
        "kernels leaked before install stay until the next tf.random.set_seed"
    )


def _dressed(wrapper: Callable, original: Callable) -> Callable:
    """The wrapper with the original's name and docstring, marked as ours."""
    wrapper.__name__ = getattr(original, "__name__", wrapper.__name__)
    wrapper.__qualname__ = getattr(original, "__qualname__", wrapper.__qualname__)
    wrapper.__doc__ = original.__doc__
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    wrapper.__tf_patches__ = NAME  # type: ignore[attr-defined]
    return wrapper
