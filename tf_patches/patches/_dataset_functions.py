"""What dataset_epoch_repeat and parallel_random_map share: which stateful random ops a traced
``tf.data`` function holds, and which datasets an iterator reads.

A stateful random op (``RandomUniform`` and the others in ``RANDOM_KERNELS``) keeps a Philox stream
in its kernel, seeded from its ``seed``/``seed2`` attributes when the kernel is built. Under a
global seed (or with an op seed) those attributes are fixed at trace time, so every kernel built
from the function starts the same stream; with both 0 the kernel seeds itself at random. Each
iterator over a dataset builds its functions' kernels anew (TF 2.12.1 and 2.21.0 alike: one
iterator over ``.repeat(2)`` continues the stream, two iterators repeat it).

Read once per traced function (its graph's ops, and the function definitions it calls: ``If``
branches, nested ``tf.function``\\ s), never per element.
"""

from __future__ import annotations

import weakref
from collections import Counter, namedtuple
from typing import Any, Iterator, List, Optional, Set, Tuple

from ..core.signature import Site

# Ops whose kernel holds a random stream seeded from its seed/seed2 attributes (TF 2.12–2.21's op
# registry: every stateful op with both attributes, less the cuDNN RNNs (Keras feeds them 0), the
# queues and SnapshotDataset, which are not random draws in a map function).
RANDOM_KERNELS = frozenset((
    "RandomUniform", "RandomStandardNormal", "TruncatedNormal", "RandomUniformInt", "RandomShuffle",
    "Multinomial", "RandomGamma", "RandomPoisson", "RandomPoissonV2", "ParameterizedTruncatedNormal",
    "RandomCrop", "SampleDistortedBoundingBox", "SampleDistortedBoundingBoxV2", "FractionalMaxPool",
    "FractionalAvgPool", "UniformCandidateSampler", "LogUniformCandidateSampler",
    "LearnedUnigramCandidateSampler", "FixedUnigramCandidateSampler", "AllCandidateSampler",
    "ThreadUnsafeUnigramCandidateSampler",
))
# What the user called, for the message.
PUBLIC_NAMES = {
    "RandomUniform": "tf.random.uniform, tf.image.random_*, tf.nn.dropout",
    "RandomStandardNormal": "tf.random.normal",
    "TruncatedNormal": "tf.random.truncated_normal",
    "RandomUniformInt": "tf.random.uniform with an int dtype, tf.image.random_crop",
    "RandomShuffle": "tf.random.shuffle",
    "Multinomial": "tf.random.categorical",
    "RandomGamma": "tf.random.gamma",
    "RandomPoissonV2": "tf.random.poisson",
    "SampleDistortedBoundingBoxV2": "tf.image.sample_distorted_bounding_box",
}


# A collections.namedtuple: typing.NamedTuple compiles each field's annotation under `from
# __future__ import annotations` (≈60 µs a class at apply_all, issue 38).
class SeededDraws(namedtuple("SeededDraws", ("ops", "site", "function"))):
    """The seeded stateful random ops of one traced dataset function, and the user's line that
    built it (the ``.map(`` call): ``ops``, ``((op type, seed, seed2), ...)`` in graph order;
    ``site``, a Site or None; ``function``, the user's function's name, or ""."""

    __slots__ = ()

    def describe(self) -> str:
        """'RandomUniform x2 (tf.random.uniform, ...), RandomStandardNormal (tf.random.normal)'."""
        counts = Counter(op for op, _, _ in self.ops)
        parts = []
        for op, count in counts.items():
            times = f" x{count}" if count > 1 else ""
            public = PUBLIC_NAMES.get(op)
            parts.append(f"{op}{times}" + (f" ({public})" if public else ""))
        return ", ".join(parts)


def seeded_random_ops(function: Any) -> Tuple[Tuple[str, int, int], ...]:
    """(op type, seed, seed2) of every stateful random op with a fixed seed in a traced function
    (a ConcreteFunction, or anything with a ``graph``), the functions it calls included."""
    graph = getattr(function, "graph", None)
    if graph is None:
        return ()
    found: List[Tuple[str, int, int]] = []
    for op in graph.get_operations():
        if op.type in RANDOM_KERNELS:
            try:
                seeds = (int(op.get_attr("seed")), int(op.get_attr("seed2")))
            except (ValueError, TypeError):
                continue
            if seeds != (0, 0):
                found.append((op.type, *seeds))
    # Branches of If/While, nested tf.functions: their definitions, recorded on the outer graph.
    for nested in list(getattr(graph, "_functions", {}).values()):
        definition = getattr(nested, "definition", None)
        for node in getattr(definition, "node_def", ()):
            if node.op in RANDOM_KERNELS:
                seeds = (node.attr["seed"].i, node.attr["seed2"].i)
                if seeds != (0, 0):
                    found.append((node.op, *seeds))
    return tuple(found)


_draws: "weakref.WeakKeyDictionary[Any, Optional[SeededDraws]]" = weakref.WeakKeyDictionary()


def remember(wrapper: Any, site: Optional[Site]) -> Optional[SeededDraws]:
    """Read a just-traced ``StructuredFunctionWrapper``'s seeded random ops (None: it has none)
    and remember them, with the user's line that built it, for as long as the wrapper lives."""
    try:
        ops = seeded_random_ops(getattr(wrapper, "function", None))
    except Exception:  # a graph we cannot read must never break the user's map
        ops = ()
    draws = None
    if ops:
        func = getattr(wrapper, "_func", None)
        draws = SeededDraws(ops, site, getattr(func, "__name__", "") or "")
    try:
        _draws[wrapper] = draws
    except TypeError:  # not weak-referenceable: nothing to remember it by
        pass
    return draws


def draws_of(wrapper: Any) -> Optional[SeededDraws]:
    """What ``remember`` found for this wrapper (None: nothing); a wrapper traced before install
    is read now, without the line that built it."""
    try:
        if wrapper in _draws:
            return _draws[wrapper]
    except TypeError:  # not weak-referenceable
        return None
    return remember(wrapper, None)


def own_init(cls: type) -> Any:
    """``cls``'s own ``__init__`` (AttributeError where it has none of its own: TF moved it, and
    replacing an inherited one would change every class sharing it)."""
    init = vars(cls).get("__init__")
    if init is None:
        raise AttributeError(f"{cls.__module__}.{cls.__qualname__} has no __init__ of its own")
    return init


def functions_of(dataset: Any) -> List[Any]:
    """The StructuredFunctionWrappers a dataset applies (its map, filter, interleave... function)."""
    try:
        return list(dataset._functions())
    except Exception:
        return []


def datasets_read(dataset: Any, limit: int = 10_000) -> Iterator[Any]:
    """``dataset`` and every dataset it reads from, each once (inputs, and the dataset a
    ``DatasetV1Adapter`` wraps)."""
    seen: Set[int] = set()
    stack = [dataset]
    while stack and len(seen) < limit:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        try:
            stack.extend(current._inputs())
        except Exception:
            pass
        wrapped = getattr(current, "_dataset", None)
        if wrapped is not None:
            stack.append(wrapped)
