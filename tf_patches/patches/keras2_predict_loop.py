"""Keras 2's ``Model.predict`` in a loop: one in-memory batch without the leaking input pipeline.

TF issue 58676 (also keras-team/keras 13118, TF 44711), open. ``predict`` builds a new input
pipeline on every call: ``TensorLikeDataAdapter`` turns a NumPy array or tensor into
``range → map(permutation) → flat_map(slice_batch_indices) → map(grab_batch)``, tracing three new
tf.data functions, and each dataset op that carries one is a new kernel in the eager kernel cache,
kept for good. Measured for a tiny model: +331 / 419 / 380 MB per 1,500 calls on TF 2.12 / 2.13 /
2.14, 29 MB on 2.15, ≤ 19 MB from 2.16 (docs/measurements.md, "Loops"); here 248 KiB and 45 ms per call on
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

Keras 2 after TF 2.15 (issue 24): the gate is the Keras 2 implementation ``tf.keras`` actually is,
not TF's version alone. TF < 2.15 bundles the ``keras`` 2.x package (served, as above); from TF 2.16
TF's loader makes ``tf.keras`` the ``tf_keras`` package (tf-keras 2.16–2.21) under
``TF_USE_LEGACY_KERAS=1`` (or true/True), else Keras 3. tf_keras's ``TensorLikeDataAdapter`` is the
same code as Keras 2.13–2.15's (``tf_keras.src.engine.data_adapter``), and the 58676 leak has
shrunk there, but its per-call cost has not (docs/findings/keras_predict_loops.md, 8 rows, a tiny
model, on a loaded 2-core box): stock ``predict`` grows 0.2–1.0 MiB per 1,000 calls in the steady
state on tf-keras 2.17–2.21 (second half of 4,000–10,000 calls; ≈5.0 on 2.16, steady through
6,000 calls) and costs ≈70–80 ms a call against ≈2 ms for ``model(x)`` (unloaded); patched
(tf-keras 2.21, benchmarks/keras2_predict_loop.py, 2,000 calls) it builds no pipeline, grows 0.11
MiB per 1,000 calls against 0.99 and runs 6.7× faster (7–13× in shorter runs), predictions
bit-identical. So tf_keras under the switch is
served; the reason says which case skips: Keras 3 (no such adapter; its ``predict`` grows ≈1.1 MiB
per 1,000 calls over 10,000 on 3.15.1, no 58676 leak), the switch without tf-keras installed, the
``keras`` 2.x package on TF >= 2.16 (not a pairing TF ships), and TF 2.15 (Keras 2.15: 29 MB per
1,500 calls, issue 9; its speed not measured).
"""

from __future__ import annotations

import importlib
import inspect
import numbers
from types import ModuleType
from typing import Any, List, Mapping, Optional, Tuple

from ..core import importhook
from ..core.canary import Finding, per_1000
from ..core.context import PatchContext, tf_module
from ..core.environment import Environment
from ..core.gate import Gate, parse_version
from ..core.keras import keras_in_use, keras_version
from ..core.keras import keras_is_separate as _keras_is_separate
from ..core.patch import Patch
from ..core.units import KIB
from ..core.signature import EagerExecutions, Installer, Probe, Signature, by_minor

NAME = "keras2_predict_loop"

# Where tf.keras's data adapters live, by package: Keras 2.13–2.15, then 2.6–2.12; tf-keras 2.16–2.21.
_ADAPTER_MODULES = {"keras": ("keras.src.engine.data_adapter", "keras.engine.data_adapter"),
                    "tf_keras": ("tf_keras.src.engine.data_adapter",)}
_DEFAULT_BATCH_SIZE = 32  # TensorLikeDataAdapter's default when neither batch_size nor steps is given
_ADAPTER_PARAMETERS = ("x", "y", "sample_weights", "sample_weight_modes", "batch_size", "epochs",
                       "steps", "shuffle")


def precondition(env: Environment, options: Mapping[str, Any]) -> Optional[str]:
    """The Keras in use must be Keras 2: the ``keras`` 2.x package on TF < 2.15, or tf_keras under
    ``TF_USE_LEGACY_KERAS=1`` on TF >= 2.16; Keras 3 has no TensorLikeDataAdapter, and its
    predict loop does not leak (measured below)."""
    package, version = keras_in_use(env.version)
    if version is None:
        if package == "tf_keras":
            return ("TF_USE_LEGACY_KERAS asks for tf_keras, which is not installed "
                    "(tf.keras cannot load; `pip install tf-keras`)")
        return "Keras is not installed"
    release = parse_version(version)
    if release is None or release.major != 2:
        return (f"TensorFlow {env.version} with Keras {version}: tf.keras is Keras {release.major if release else version}, "
                "which has no TensorLikeDataAdapter and whose predict does not leak as TF 58676 did "
                "(Keras 3.15.1 on TF 2.21: ≈1.1 MiB per 1,000 calls over 10,000; "
                "docs/findings/keras_predict_loops.md); Keras 2 there is tf-keras with TF_USE_LEGACY_KERAS=1")
    if package == "keras" and _keras_is_separate(env.version):
        return (f"TensorFlow {env.version} with the keras {version} package (Keras 2 without the "
                "legacy switch): a pairing TF >= 2.16 does not ship, not measured")
    return None


def adapter_module(tf_version: Optional[str] = None) -> ModuleType:
    """Keras 2's ``data_adapter`` module, the one ``tf.keras`` uses (``keras``'s, or ``tf_keras``'s
    under the legacy switch on TF >= 2.16; TF's version is read from TF when not given)."""
    if tf_version is None:
        import tensorflow as tf

        tf_version = tf.__version__
    errors = []
    for name in _ADAPTER_MODULES[keras_in_use(tf_version)[0]]:
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
    import tensorflow as tf

    package = keras_in_use(tf.__version__)[0]
    if importhook.initializing(package):
        # `import tf_keras` first: TF's import, and so this install, finishes inside tf_keras's
        # own, before its data adapter loads (importing it from here is circular): serve it then.
        served: List[str] = []

        def later(data_adapter: ModuleType) -> None:
            if ctx.active:
                served.append(_serve(ctx, data_adapter))
                ctx.now(served[-1])

        cancel = importhook.when_loaded(_ADAPTER_MODULES[package], later, f"{NAME} ({package}'s predict)")
        if cancel is None:  # it ran now: the data adapter was loaded already (or, importing, failed)
            if not served:
                raise RuntimeError(f"{package}'s data adapter is still importing: not served")
            return served[0]
        ctx.on_revert(f"the {package} import hook", cancel)
        return (f"{package} is importing: its TensorLikeDataAdapter will serve one in-memory batch "
                "once loaded, the rest as before")
    data_adapter = adapter_module(tf.__version__)
    keras_model = tf.keras.Model.__module__.split(".")[0]
    if keras_model != package:  # the switch changed after tf.keras had loaded: serve the one in use
        raise RuntimeError(f"tf.keras is {keras_model}'s, not {package}'s (TF_USE_LEGACY_KERAS changed "
                           "after tf.keras was loaded?)")
    return _serve(ctx, data_adapter)


def _serve(ctx: PatchContext, data_adapter: ModuleType) -> str:
    import numpy as np
    import tensorflow as tf

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
# Bytes one stock pipeline keeps, by TF minor. Keras 2 package: this docstring's 248 KiB per predict
# on 2.12.1, 268 on 2.14.1. tf-keras (TF_USE_LEGACY_KERAS=1): the second-half RSS slopes of
# docs/findings/keras_predict_loops.md (MiB per 1,000 predict calls × 1.024 = KiB per call).
_UNIT_BYTES = {"2.12": 248 * KIB, "2.14": 268 * KIB,
               "2.16": int(5.1 * KIB), "2.17": int(0.9 * KIB), "2.18": int(0.2 * KIB), "2.19": int(0.3 * KIB),
               "2.20": int(0.85 * KIB), "2.21": int(1.0 * KIB)}


def _unit_bytes(version: str) -> Optional[int]:
    """Measured where measured; 258 KiB for the other Keras 2 package releases (the adapter's code
    is the same in 2.6–2.14); None (fitted from RSS by the report) for unmeasured tf-keras ones."""
    release = parse_version(version)
    old_keras = release is not None and (release.major, release.minor) < (2, 15)
    return by_minor(_UNIT_BYTES, 258 * KIB if old_keras else None)(version)


_SIGNATURE = Signature(
    unit="Keras 2 input pipelines built for in-memory data (predict/fit/evaluate calls)",
    unit_bytes=_unit_bytes, floor=8,  # measured sizes: _UNIT_BYTES above
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
        sites = self.sites

        def slice_inputs(adapter_self: Any, *args: Any, **kwargs: Any) -> Any:
            if installer.active and context.executing_eagerly():
                self._count += 1
                sites.hit()
            return original(adapter_self, *args, **kwargs)

        slice_inputs.__wrapped__ = original  # type: ignore[attr-defined]
        installer.replace(adapter, "slice_inputs", slice_inputs)

    def count(self) -> int:
        return self._count


# --- canary: is the bug still upstream? ---------------------------------------------------------
def canary() -> Finding:
    import tensorflow as tf

    package, version = keras_in_use(tf.__version__)
    if not (version or "none").startswith("2."):
        return Finding(None, f"Keras 2 only; this build's tf.keras is {package} {version or 'none'}")

    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    data = tf.zeros([8, 4])
    kib = per_1000(lambda: model.predict(data, verbose=0), 200, 20)
    return Finding(kib > 50_000, f"{kib:,.0f} KiB per 1,000 predict calls")  # 2.12–2.14: ≈250,000


# --- the declaration (core/patch.py) -------------------------------------------------------------
PATCH = Patch(
    name=NAME,
    title="Keras 2 predict() in a loop: one in-memory batch without the leaking tf.data pipeline",
    issue="https://github.com/tensorflow/tensorflow/issues/58676",
    # Keras 2 as its own package (tf.keras from TF 2.6); TF 2.15 (Keras 2.15, growth small: issue 9,
    # not measured for speed) is left out; from TF 2.16 the precondition decides by the Keras in use.
    gate=Gate(versions=">=2.6,!=2.15.*"),
    precondition=precondition,
    install=install,
    signature=_SIGNATURE,
    probe=KerasPipelines,
    canary=canary,
)
