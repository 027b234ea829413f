"""Keras 2's ``Model.predict`` in a loop: one in-memory batch without the leaking input pipeline.

TF issue 58676 (also keras-team/keras 13118, TF 44711), open. ``predict`` builds a new input
pipeline on every call: ``TensorLikeDataAdapter`` turns a NumPy array or tensor into
``range → map(permutation) → flat_map(slice_batch_indices) → map(grab_batch)``, tracing three new
tf.data functions, and each dataset op that carries one is a new kernel in the eager kernel cache,
kept for good. Measured for a tiny model: +331 / 419 / 380 MB per 1,500 calls on TF 2.12 / 2.13 /
2.14, 29 MB on 2.15, ≤ 19 MB from 2.16 (shared/FINDINGS.md); here 248 KiB and 45 ms per call on
2.12.1 (268 KiB, 33 ms on 2.14.1), and clearing the kernel cache every 50 calls bounds it at
≈8 MiB: the kernel cache it is. The adapter's code is the same in Keras 2.6–2.15.

The fix replaces that pipeline only where it yields exactly one batch — inputs all NumPy arrays or
eager tensors with 1 ≤ rows ≤ batch_size; no targets, weights, ``steps``, shuffling or second
epoch; the default distribution strategy; eager mode — with ``from_tensor_slices(inputs).batch()``,
whose ops have fixed attributes: 1.6 KiB and 2.1 ms per call (2.12.1). The batch holds the same
values (Keras's own ``_process_tensorlike`` and ``pack_x_y_sample_weight`` prepare the inputs; the
original gathers rows 0..n-1, the identity) with the same element spec (a static batch size when
rows == batch_size, unknown otherwise), so ``predict`` runs the same traced ``predict_function`` on
the same tensors. All of ``predict`` around it (callbacks, progress bar, step counters, errors)
is Keras's own, and every other input gets the original adapter. What differs: the dataset's
cardinality is known (1, not unknown), which Keras never reads here (the adapter's size comes
first), and it is not autotuned.
"""

from __future__ import annotations

import importlib
import inspect
import numbers
from types import ModuleType
from typing import Any, Mapping, Optional, Tuple

from ..core.canary import Finding, per_1000
from ..core.context import PatchContext, tf_module
from ..core.environment import Environment, installed_distribution
from ..core.gate import Gate, parse_version
from ..core.memory import KIB
from ..core.signature import EagerExecutions, Installer, Probe, Signature, by_minor

NAME = "keras2_predict_loop"
TITLE = "Keras 2 predict() in a loop: one in-memory batch without the leaking tf.data pipeline"
ISSUE_URL = "https://github.com/tensorflow/tensorflow/issues/58676"
# Keras 2 as its own package (tf.keras from TF 2.6); from TF 2.15 the growth is small (issue 9).
GATE = Gate(versions=">=2.6,<2.15")

# Where tf.keras's data adapters live: Keras 2.13–2.15, then 2.6–2.12.
_ADAPTER_MODULES = ("keras.src.engine.data_adapter", "keras.engine.data_adapter")
_KERAS_DISTRIBUTIONS = ("keras", "keras-nightly")
_DEFAULT_BATCH_SIZE = 32  # TensorLikeDataAdapter's default when neither batch_size nor steps is given
_ADAPTER_PARAMETERS = ("x", "y", "sample_weights", "sample_weight_modes", "batch_size", "epochs",
                       "steps", "shuffle")


def keras_version() -> Optional[str]:
    """The installed Keras's version, without importing it; None if absent."""
    return installed_distribution("keras", _KERAS_DISTRIBUTIONS)[1]


def precondition(env: Environment, options: Mapping[str, Any]) -> Optional[str]:
    """Keras 2 is required: the gate's TF versions ship it, but a user can install another."""
    version = keras_version()
    if version is None:
        return "Keras is not installed"
    release = parse_version(version)
    if release is None or release.major != 2:
        return (f"Keras {version} is installed, not Keras 2: this patch serves Keras 2's "
                "TensorLikeDataAdapter, which Keras 3 does not have")
    return None


def adapter_module() -> ModuleType:
    """Keras 2's ``data_adapter`` module, the one ``tf.keras`` uses."""
    errors = []
    for name in _ADAPTER_MODULES:
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            errors.append(f"{name}: {exc}")
    raise ImportError("; ".join(errors))


def _rows(value: Any, tf: ModuleType, np: ModuleType) -> Optional[int]:
    """The first dimension of an in-memory array or eager tensor; None for anything else."""
    if isinstance(value, np.ndarray):
        return value.shape[0] if value.ndim else None
    if isinstance(value, tf.Tensor) and value.shape.rank:
        return value.shape[0]
    return None


def single_batch(arguments: Mapping[str, Any], tf: ModuleType, np: ModuleType) -> Optional[Tuple[int, int]]:
    """``(rows, batch_size)`` when ``TensorLikeDataAdapter`` arguments (bound by name, defaults
    left out) make exactly one batch of in-memory inputs, unshuffled, for one epoch; else None."""
    if any(arguments.get(name) is not None for name in ("y", "sample_weights", "sample_weight_modes", "steps")):
        return None
    if arguments.get("epochs", 1) != 1 or arguments.get("shuffle", False):
        return None
    batch_size = arguments.get("batch_size") or _DEFAULT_BATCH_SIZE
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral):
        return None
    flat = tf.nest.flatten(arguments["x"])
    rows = {_rows(value, tf, np) for value in flat}
    if len(rows) != 1:
        return None  # nothing, mixed row counts (Keras raises its own error), or no shape
    (count,) = rows
    return (int(count), int(batch_size)) if count is not None and 1 <= count <= batch_size else None


def install(ctx: PatchContext) -> str:
    import numpy as np
    import tensorflow as tf

    data_adapter = adapter_module()
    adapter_cls = data_adapter.TensorLikeDataAdapter
    original = adapter_cls.__init__
    signature = inspect.signature(original)
    missing = [name for name in _ADAPTER_PARAMETERS if name not in signature.parameters]
    if missing:
        raise TypeError(f"TensorLikeDataAdapter.__init__ lacks {missing}: not the Keras 2 adapter this patch knows")
    process, pack = data_adapter._process_tensorlike, data_adapter.pack_x_y_sample_weight
    options = tf.data.Options()
    # The original's options (Keras 2.11–2.15; 2.6–2.10 leave auto-sharding, read by non-default
    # strategies only, at its default): no static rewrites, sharding by data.
    options.experimental_optimization.apply_default_optimizations = False
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    # And no autotuning: one batch has nothing to tune, and starting and stopping the tuning
    # thread costs ≈8 ms per predict (2.12.1: 10.9 ms per call with it, 2.1 ms without).
    options.autotune.enabled = False

    def route(adapter: Any, args: tuple, kwargs: dict) -> Optional[Tuple[Mapping[str, Any], Tuple[int, int]]]:
        """The bound arguments and ``(rows, batch_size)`` where one batch can be served; else None.
        Exact class only (a subclass may slice differently); the default strategy only (another
        rebatches by the dataset's structure); eager only (the leak is the eager kernel cache's)."""
        if type(adapter) is not adapter_cls or not tf.executing_eagerly() or tf.distribute.has_strategy():
            return None
        try:
            arguments = signature.bind(adapter, *args, **kwargs).arguments
        except TypeError:
            return None  # the original raises its own error
        batch = single_batch(arguments, tf, np)
        return None if batch is None else (arguments, batch)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if not ctx.active:  # reverted: an adapter class or method user code kept is Keras's own
            return original(self, *args, **kwargs)
        routed = route(self, args, kwargs)
        if routed is None:
            original(self, *args, **kwargs)
            return
        arguments, (rows, batch_size) = routed
        x, _, _ = process((arguments["x"], None, None))  # the original's float → floatx casts
        # The original's batch has a static size when rows == batch_size, an unknown one otherwise.
        dataset = tf.data.Dataset.from_tensor_slices(pack(x)).batch(batch_size, drop_remainder=rows == batch_size)
        self._size = 1
        self._batch_size = batch_size
        self._partial_batch_size = rows % batch_size
        self._shuffle = arguments.get("shuffle", False)
        self._dataset = dataset.with_options(options)

    ctx.replace_attribute(adapter_cls, "__init__", __init__)
    return (f"{data_adapter.__name__}.TensorLikeDataAdapter: one in-memory batch (no targets, "
            "steps or shuffling) is served by from_tensor_slices().batch(), the rest as before")


# --- diagnose: the live signature ---------------------------------------------------------------
SIGNATURE = Signature(
    unit="Keras 2 input pipelines built for in-memory data (predict/fit/evaluate calls)",
    # This module's docstring: 248 KiB per predict on 2.12.1, 268 on 2.14.1.
    unit_bytes=by_minor({"2.12": 248 * KIB, "2.14": 268 * KIB}, 258 * KIB), floor=8,
    fix="one in-memory batch served without the leaking pipeline",
    name='a new tf.data input pipeline built per Keras 2 predict() call',
    code_fix=('in a loop over small in-memory batches call `model(x, training=False)` instead of '
              '`model.predict(x)`'),
    upstream_fix='open upstream (TF 58676)')


class KerasPipelines(Probe):
    """Keras 2's ``TensorLikeDataAdapter`` slicing in-memory data into a new pipeline, eagerly
    (the patch serves one batch without it)."""

    def __init__(self) -> None:
        self._count = 0

    def install(self, installer: Installer, executor: EagerExecutions) -> None:
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


PROBE = KerasPipelines


# --- canary: is the bug still upstream? ---------------------------------------------------------
def canary() -> Finding:
    version = keras_version() or "none"
    if not version.startswith("2."):
        return Finding(None, f"Keras 2 only; this build has Keras {version}")
    import tensorflow as tf

    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    data = tf.zeros([8, 4])
    kib = per_1000(lambda: model.predict(data, verbose=0), 200, 20)
    return Finding(kib > 50_000, f"{kib:,.0f} KiB per 1,000 predict calls")  # 2.12–2.14: ≈250,000
