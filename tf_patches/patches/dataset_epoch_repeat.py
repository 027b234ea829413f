"""The same augmentation every epoch: a ``tf.data`` function's seeded random ops repeat at every
new iteration of the dataset.

Under a global seed, ``Dataset.map(lambda x: tf.image.random_flip_left_right(x))`` (any
``tf.random.*``, ``tf.image.random_*``, ``tf.nn.dropout`` in a map, filter, flat_map, interleave...
function) traces stateful random ops whose ``seed``/``seed2`` attributes are fixed. Each iterator
builds the function's kernels anew from those attributes, and Keras iterates a dataset anew each
epoch: ``fit(ds, epochs=3)`` saw the same flips and noise in all three epochs on Keras 3.15, tf_keras
2.21 and Keras 2.12 (docs/measurements.md, "Today's stack"). Without a seed, each epoch differs; so
``apply_all(deterministic=True)``, which sets the global seed, turns a varied run into one that
repeats epoch 1's augmentation. Upstream: TF issues 44195, 35682, 35090, 29101, closed unchanged;
TF's own ``map_test.py`` asserts the repetition. Not affected: one iterator over ``.repeat()``
(``steps_per_epoch``), ``Dataset.shuffle`` (``reshuffle_each_iteration``), ``tf.random.Generator``
and Keras 3 augmentation layers (state in a variable, which persists across iterations).

An explicit op seed (``tf.random.uniform([], seed=5)``) repeats in exactly the same way, with or
without a global seed (measured on 2.21): it is warned about too, since the user asked for
repeatable runs, not for one epoch's values every epoch. Ops with neither seed (no global seed,
no op seed) differ every iteration and are left alone.

Detection (mode ``"warn"``, the default): when a dataset function is traced, its graph (and the
functions it calls) is read once for stateful random ops with fixed seeds
(``_dataset_functions``); when an eager iterator is created over a dataset, each such function it
reads counts one iteration, and the second one warns, at the user's ``.map(`` (or ``filter(``...)
line. Nothing runs per element.

``"rerandomize"`` (opt-in: it changes numbers): while a dataset function is traced, each seeded
``RandomUniform``, ``RandomStandardNormal``, ``TruncatedNormal`` and ``RandomUniformInt`` op it
creates is built as the ``tf.random.Generator`` op of the same draw (``StatefulUniform``,
``StatefulStandardNormalV2``, ``StatefulTruncatedNormal``, ``StatefulUniformInt``) on a Philox
state variable of its own: those ops read and advance the state in one step, and from the state
``[0, seed2, seed]`` they draw exactly the stateful kernel's stream, call after call (checked bit
for bit on TF 2.12 and 2.21, every float and int dtype, scalar and shaped). ``RandomShuffle`` has
no such op: it reads the state with ``RngReadAndSkip`` and draws with ``StatelessShuffle``. Before
iteration *k* of the dataset the state is set to ``[0, seed2, seed]`` for *k* = 1 (stock's values;
for shuffle, its first call) and to ``[0, seed2, key_k]`` with ``key_k`` derived from (seed,
seed2, k) by BLAKE2b for *k* ≥ 2: a new stream per iteration that depends only on the op's seeds
and *k*, the same in every run and process (as ``Dataset.random(rerandomize_each_iteration=True)``
draws a new seed pair per iteration). Other random ops (``tf.random.categorical``, ``gamma``,
``poisson``...) keep stock's kernels and are still warned about. Limits: an iteration inside a
``tf.function`` (``for x in ds`` traced once) does not reset the state (its draws continue the
stream rather than restarting it); two iterators of one dataset alive at once share its state.
"""

from __future__ import annotations

import hashlib  # at the top, as every import: none happens after apply_all() loads (issue 39)
import sys
import threading
import weakref
from typing import Any, Callable, List, Optional, Tuple

from ..core import traps
from ..core.canary import Finding
from ..core.context import PatchContext, tf_module
from ..core.errors import ReproducibilityWarning, logger
from ..core.gate import Gate
from ..core.options import Option, choice
from ..core.patch import Patch
from . import _dataset_functions as functions

NAME = "dataset_epoch_repeat"
_MODES = ("warn", "rerandomize")
_OPTIONS = (
    Option(NAME, "TF_PATCHES_DATASET_EPOCH_REPEAT", choice(*_MODES), "warn",
           "warn (default): one warning naming the map's line when a dataset whose map/filter/... "
           "function draws seeded random numbers is iterated again (an epoch repeating the last); "
           "rerandomize: each new iteration gets a new reproducible stream (iteration 1 keeps "
           "stock's values)."),
)
_TRAP = traps.Trap(
    explanation="a tf.data map (or filter, interleave...) function draws the same random numbers at "
                "every new iteration of the dataset, so every epoch sees epoch 1's augmentation",
    fix='apply_all(dataset_epoch_repeat="rerandomize"): a new reproducible stream each iteration; or '
        "iterate once (.repeat() with steps_per_epoch), or draw from a tf.random.Generator",
    options={NAME: "rerandomize"},
    too_repeatable=True,
)


_PHILOX = 1  # RNG_ALG_PHILOX: the stateful kernels' algorithm
# The stateful op wrappers rerandomize replaces: (gen_random_ops function, its parameters before
# seed/seed2/name, the op drawing the same stream from a state variable: a tf.random.Generator op
# in gen_stateful_random_ops, or "shuffle": RngReadAndSkip then StatelessShuffle).
_REPLACED: Tuple[Tuple[str, Tuple[str, ...], str], ...] = (
    ("random_uniform", ("shape", "dtype"), "stateful_uniform"),
    ("random_standard_normal", ("shape", "dtype"), "stateful_standard_normal_v2"),
    ("truncated_normal", ("shape", "dtype"), "stateful_truncated_normal"),
    ("random_uniform_int", ("shape", "minval", "maxval"), "stateful_uniform_int"),
    ("random_shuffle", ("value",), "shuffle"),
)


class _Tracing(threading.local):
    """The dataset functions being traced in this thread (innermost last): the streams each gets."""

    def __init__(self) -> None:
        self.streams: List[List["_Stream"]] = []


class _Stream:
    """One rerandomized op's Philox state: a variable [counter_low, counter_high, key]."""

    __slots__ = ("variable", "seed", "seed2")

    def __init__(self, variable: Any, seed: int, seed2: int):
        self.variable, self.seed, self.seed2 = variable, seed, seed2

    def state(self, iteration: int) -> List[int]:
        key = self.seed if iteration <= 1 else _iteration_key(self.seed, self.seed2, iteration)
        return [0, self.seed2, key]


def _made_by_keras(frame: Any) -> Optional[str]:
    """How Keras's fit makes this iterator (a frame or two above ``Dataset.__iter__``), where it
    makes one that is not the epoch's own: ``"unread"``, one that nothing reads (Keras 2 and
    tf_keras's ``DataHandler.enumerate_epochs`` make one before their epoch loop and replace it at
    once on a finite dataset; Keras 3's ``EpochIterator._enumerate_iterator`` makes one after each
    epoch's steps, which the next epoch replaces unless ``steps_per_epoch`` is set); ``"ahead"``,
    that one of Keras 3 where the next epoch reads it (none does after the last). None otherwise.
    Counting an unread iterator set the next epoch's stream one too far (rerandomize: epoch 1 was
    not stock's on tf_keras) and warned on ``fit(epochs=1)``."""
    for _ in range(3):
        if frame is None:
            return None
        name, module = frame.f_code.co_name, str(frame.f_globals.get("__name__", ""))
        if name == "enumerate_epochs" and module.startswith(("keras.", "tf_keras.")):
            local = frame.f_locals
            recreate = getattr(getattr(local.get("self"), "_adapter", None), "should_recreate_iterator", None)
            return "unread" if "epoch" not in local and recreate is not None and recreate() else None
        if name == "_enumerate_iterator" and module.startswith("keras."):  # Keras >= 3.9 or so
            local = frame.f_locals
            if "step" not in local:
                return None  # the epoch's own, made before its steps
            # After the steps: the next epoch reads it only with steps_per_epoch set (else the next
            # epoch makes its own).
            return "ahead" if getattr(local.get("self"), "steps_per_epoch", None) else "unread"
        frame = frame.f_back
    return None


def _iteration_key(seed: int, seed2: int, iteration: int) -> int:
    """Iteration ``iteration``'s Philox key: from the op's seeds and the iteration only (the same
    in every process and Python: BLAKE2b of their decimal text), 63 bits (an int64 state word)."""
    digest = hashlib.blake2b(f"{seed}:{seed2}:{iteration}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


class _Iterations:
    """Counts the iterations of each dataset function with seeded random ops, and acts on them:
    warns at the second, and (rerandomize) sets each stream for the iteration."""

    def __init__(self, patch: PatchContext, mode: str):
        self._patch = patch
        self._mode = mode
        self._counts: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()
        self.streams: "weakref.WeakKeyDictionary[Any, List[_Stream]]" = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def begin(self, dataset: Any, frame: Any) -> None:
        """An eager iterator is about to be created over ``dataset``."""
        seen = set()
        counted = []  # (wrapper, its draws, its streams): the functions this iteration counts for
        for read in functions.datasets_read(dataset):
            for wrapper in functions.functions_of(read):
                if id(wrapper) in seen:
                    continue
                seen.add(id(wrapper))
                streams = self.streams.get(wrapper)
                draws = functions.draws_of(wrapper)
                if draws is not None or streams:
                    counted.append((wrapper, draws, streams))
        if not counted:
            return
        made = _made_by_keras(frame)  # read only here: most iterators have nothing to count
        if made == "unread":
            return  # not an iteration: nothing reads it
        # Keras 3's fit makes each epoch's iterator at the end of the one before (unread after the
        # last epoch): there, the second iterator repeats nothing yet, and the third says it did.
        repeats_from = 3 if made == "ahead" else 2
        for wrapper, draws, streams in counted:
            with self._lock:
                count = self._counts[wrapper] = self._counts.get(wrapper, 0) + 1
            if streams:
                for stream in streams:
                    stream.variable.assign(stream.state(count))
            if draws is not None and count >= repeats_from:
                self._warn(draws, frame)

    def _warn(self, draws: functions.SeededDraws, frame: Any) -> None:
        what = f"the function {draws.function!r} passed to this dataset" if draws.function else \
            "this dataset's function"
        deterministic = bool(self._patch.options.get("deterministic"))
        text = (f"{what} draws from stateful random ops with fixed seeds ({draws.describe()}); every "
                "new iteration of the dataset (each epoch of Keras fit) rebuilds them from the same "
                "seeds, so this iteration repeats the values of the first")
        if deterministic:
            text += (" (apply_all(deterministic=True) set the global seed: without it each epoch "
                     "would differ)")
        if self._mode == "rerandomize":
            text += ('. dataset_epoch_repeat="rerandomize" rebuilds only tf.random.uniform, normal, '
                     "truncated_normal, uniform int and shuffle traced after apply_all(): draw these "
                     "from a tf.random.Generator, or use stateless ops seeded from Dataset.random("
                     "rerandomize_each_iteration=True) zipped in")
        else:
            text += ('. Fix: apply_all(dataset_epoch_repeat="rerandomize") (or '
                     "TF_PATCHES_DATASET_EPOCH_REPEAT=rerandomize) gives each iteration a new "
                     "reproducible stream; or iterate once (.repeat() with steps_per_epoch), or draw "
                     "from a tf.random.Generator")
        site = draws.site or traps.user_site(frame)
        traps.warn(NAME, text, site=site)


def _rerandomized(original: Callable, parameters: Tuple[str, ...], draw: str, tracing: _Tracing,
                  patch: PatchContext) -> Callable:
    """``original`` (a stateful op wrapper), drawing from a state variable of its own (``draw``)
    while a dataset function is traced with fixed seeds; stock's op everywhere else."""
    ops = tf_module("python.framework.ops")
    context = tf_module("python.eager.context")
    dtypes = tf_module("python.framework.dtypes")
    array_ops = tf_module("python.ops.array_ops")
    resource_variable_ops = tf_module("python.ops.resource_variable_ops")
    stateful = tf_module("python.ops.gen_stateful_random_ops")
    generator_op = getattr(stateful, draw) if draw != "shuffle" else None
    stateless_shuffle = (getattr(tf_module("python.ops.gen_stateless_random_ops_v2"), "stateless_shuffle")
                         if draw == "shuffle" else None)

    def wrapper(*args, **kwargs):
        if not tracing.streams or not patch.active:  # the hot path: not tracing a dataset function
            return original(*args, **kwargs)
        bound = dict(zip(parameters + ("seed", "seed2", "name"), args))
        bound.update(kwargs)
        seed, seed2 = int(bound.get("seed", 0) or 0), int(bound.get("seed2", 0) or 0)
        if (seed, seed2) == (0, 0) or context.executing_eagerly():
            return original(*args, **kwargs)
        with ops.init_scope():
            if not context.executing_eagerly():  # a TF1 graph: no eager variable to hold the state
                return original(*args, **kwargs)
            variable = resource_variable_ops.ResourceVariable(
                [0, seed2, seed], dtype=dtypes.int64, trainable=False, name="tf_patches_epoch_stream")
        tracing.streams[-1].append(_Stream(variable, seed, seed2))
        rest = [bound[name] for name in parameters]
        if generator_op is not None:  # one op: reads the state, draws, advances it
            return generator_op(variable.handle, _PHILOX, *rest, name=bound.get("name"))
        # Shuffle: its kernel reserves a few blocks; RngReadAndSkip skips 256 at a time.
        state = stateful.rng_read_and_skip(variable.handle, alg=_PHILOX, delta=1)
        key = array_ops.bitcast(state[2:], dtypes.uint64)
        counter = array_ops.bitcast(state[:2], dtypes.uint64)
        return stateless_shuffle(rest[0], key, counter, _PHILOX, name=bound.get("name"))

    return wrapper


def _traced(original_init: Callable, iterations: _Iterations, tracing: Optional[_Tracing],
            patch: PatchContext) -> Callable:
    """StructuredFunctionWrapper.__init__, remembering the traced function's seeded random ops
    and the user's line that built it (and, rerandomizing, the streams made while tracing it)."""

    def __init__(self, *args, **kwargs):
        if not patch.active:
            return original_init(self, *args, **kwargs)
        site = traps.user_site(sys._getframe(1))
        if tracing is None:
            original_init(self, *args, **kwargs)
        else:
            tracing.streams.append([])
            try:
                original_init(self, *args, **kwargs)
            finally:
                made = tracing.streams.pop()
            if made:
                try:
                    iterations.streams[self] = made
                except TypeError:
                    pass
        functions.remember(self, site)

    return __init__


def _iterating(original_init: Callable, iterations: _Iterations, context: Any, patch: PatchContext) -> Callable:
    """OwnedIterator.__init__, counting the iteration first (eager iterators only: one inside a
    tf.function is created at trace, and runs at every call)."""

    def __init__(self, *args, **kwargs):
        if not patch.active:
            return original_init(self, *args, **kwargs)
        dataset = args[0] if args else kwargs.get("dataset")
        if dataset is not None and context.executing_eagerly():
            try:
                iterations.begin(dataset, sys._getframe(1))
            except ReproducibilityWarning:
                raise  # the user's -W error
            except Exception as exc:  # a walk that fails must not stop the iteration
                logger.debug("tf-patches: %s: could not read the dataset: %s", NAME, exc)
        return original_init(self, *args, **kwargs)

    return __init__


def install(ctx: PatchContext) -> str:
    structured_function = tf_module("python.data.ops.structured_function")
    iterator_ops = tf_module("python.data.ops.iterator_ops")
    context = tf_module("python.eager.context")
    mode = ctx.options.get(NAME) or "warn"
    iterations = _Iterations(ctx, mode)
    tracing = _Tracing() if mode == "rerandomize" else None
    rebuilt: List[str] = []
    if tracing is not None:
        gen_random_ops = tf_module("python.ops.gen_random_ops")
        for function, parameters, draw in _REPLACED:
            original = getattr(gen_random_ops, function)  # in every TF 2.x: a moved one fails the row
            ctx.replace_attribute(gen_random_ops, function,
                                  _rerandomized(original, parameters, draw, tracing, ctx))
            rebuilt.append(function)
    wrapper_class = structured_function.StructuredFunctionWrapper
    ctx.replace_attribute(wrapper_class, "__init__",
                          _traced(functions.own_init(wrapper_class), iterations, tracing, ctx))
    ctx.replace_attribute(iterator_ops.OwnedIterator, "__init__",
                          _iterating(functions.own_init(iterator_ops.OwnedIterator), iterations, context, ctx))
    if tracing is None:
        return ("detecting: warns at the second iteration of a dataset whose function draws seeded "
                "stateful random numbers (read at trace, counted at iterator creation)")
    return (f"fixing (rerandomize): {', '.join(rebuilt)} in dataset functions traced from now on draw "
            "a new reproducible stream at each iteration (iteration 1: stock's values); other "
            "seeded random ops are warned about")


# --- canary: is the bug still upstream? ---------------------------------------------------------
def canary() -> Finding:
    import tensorflow as tf

    tf.random.set_seed(0)
    dataset = tf.data.Dataset.range(4).map(lambda _: tf.random.uniform([]))
    first, second = list(dataset.as_numpy_iterator()), list(dataset.as_numpy_iterator())
    return Finding(first == second, "two iterations of a seeded random map "
                   + ("drew the same values" if first == second else "differ"))


# --- the declaration (core/patch.py) -------------------------------------------------------------
PATCH = Patch(
    name=NAME,
    title="tf.data random ops that repeat the same values at every new iteration (epoch)",
    issue="https://github.com/tensorflow/tensorflow/issues/35682",
    gate=Gate(versions=">=2.0"),  # measured on 2.12 and 2.21; closed upstream with no change
    options=_OPTIONS,
    install=install,
    canary=canary,
    trap=_TRAP,
    # The defaults install it too; rerandomize also replaces the op wrappers (over seed_kernel_cache's).
    lifecycle_options={NAME: "rerandomize"},
)
