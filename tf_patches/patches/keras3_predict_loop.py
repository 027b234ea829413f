"""Keras 3's ``Model.predict`` in a loop: one in-memory batch without an epoch iterator per call.

keras-team/keras 13118 (and TF 43702, 57982, 35858), on today's stack. Keras 3's TensorFlow
``predict`` builds a ``TFEpochIterator`` on every call: an ``ArrayDataAdapter`` whose
``get_tf_dataset`` makes ``range → map(permutation) → prefetch → flat_map → zip → map(grab_batch)
→ prefetch`` (four traced tf.data functions, an autotuned pipeline), distributed and iterated for
one batch. Measured on TF 2.21 + Keras 3.15.1 (CPU, docs/measurements.md, "Today's stack"):
59–69 ms per call on a
32-row array against 3.3 ms for ``model(x)`` and 0.6 ms for ``predict_on_batch(x)``, and RSS +14.5
MiB over the first 1,000 calls before it flattens (≈0.2 MiB per 1,000 after); the three give
bit-identical outputs. Slow rather than leaking: the memory is a rise, not a slope.

The fix serves ``predict`` where the pipeline would yield exactly one batch — ``x`` a NumPy array
of a numeric or bool dtype or an eager tensor, or a nested structure (dict, list, tuple) of them,
all with the same 1 ≤ rows ≤ ``batch_size`` (default 32); no ``steps`` and no ``callbacks``;
``steps_per_execution`` 1; the default distribution strategy, no Keras distribution, no
``max_steps_per_epoch``; eager — by making that batch with Keras's own code
(``pack_x_y_sample_weight``, ``convert_to_sliceable`` with its float → floatx casts,
``lists_to_tuples``; the pipeline's gather of rows 0..n-1 is the identity) and running the
model's own ``make_predict_function()`` / ``predict_function`` on it, as ``predict`` does, with the
same callback list (the progress bar for ``verbose`` as stock), the same calls to it, and the same
output assembly (``potentially_ragged_concat``, ``convert_to_np_if_not_ragged``). The element has
the same structure, dtypes and shapes as the iterator's, so the same traced function runs on the
same values: outputs bit-identical (tests/test_keras3_predict_loop.py). Every other call is
Keras's own ``predict``, untouched. Measured (benchmarks/keras3_predict_loop.py, README; a 2-core
box at load ≈15): 0.66 ms per served call against 334 ms stock (0.001–0.006× in three runs),
+0.15 MiB over the first 1,000 calls against +4.0.

Gate: Keras 3 as ``tf.keras`` on TF ≥ 2.16 (no ``TF_USE_LEGACY_KERAS``), the Keras minors whose
outputs were checked bit-identical (``_CHECKED_MINORS``: every minor 3.3–3.15, each on TF 2.21),
and the TensorFlow trainer's structure checked at install (``predict``'s parameters, the helpers
it calls): a Keras that moved them fails this patch alone, with the reason. Installed when Keras
loads its TensorFlow trainer (``import keras`` first finishes TF's import inside Keras's own).
"""

from __future__ import annotations

import inspect
import numbers
import sys
import weakref
from types import ModuleType
from typing import Any, Mapping, Optional

from ..core.canary import Finding
from ..core import importhook
from ..core.context import PatchContext
from ..core.environment import Environment
from ..core.gate import Gate, parse_version
from ..core.keras import keras_in_use
from ..core.patch import Patch
from ..core.signature import EagerExecutions, Installer, Probe, Signature

NAME = "keras3_predict_loop"
# Keras 3 minors whose outputs were checked bit-identical to stock here (tests/test_keras3_predict_loop.py's
# cases, on TF 2.21 with keras 3.3.3, 3.4.1, 3.5.0, 3.6.0, 3.7.0, 3.8.0, 3.9.2, 3.10.0, 3.11.3, 3.12.0, 3.13.2, 3.14.0, 3.15.1).
_CHECKED_MINORS = range(3, 16)
_TRAINER = "keras.src.backend.tensorflow.trainer"
_PREDICT_PARAMETERS = ("self", "x", "batch_size", "verbose", "steps", "callbacks")
_DEFAULT_BATCH_SIZE = 32  # ArrayDataAdapter's, when neither batch_size nor steps is given


def precondition(env: Environment, options: Mapping[str, Any]) -> Optional[str]:
    """``tf.keras`` must be Keras 3 at a measured version (tf_keras under the legacy switch is
    keras2_predict_loop's)."""
    package, version = keras_in_use(env.version)
    if package == "tf_keras":
        return "TF_USE_LEGACY_KERAS makes tf.keras tf_keras (Keras 2: keras2_predict_loop serves it)"
    if version is None:
        return "Keras is not installed"
    release = parse_version(version)
    if release is None or release.major != 3:
        return f"Keras {version} is not Keras 3"
    if release.minor not in _CHECKED_MINORS:
        checked = f"3.{_CHECKED_MINORS[0]}–3.{_CHECKED_MINORS[-1]}"
        return f"Keras {version}: outputs checked bit-identical on Keras {checked} only"
    return None


def trainer_module() -> ModuleType:
    """Keras 3's TensorFlow trainer (``TensorFlowTrainer``, ``TFEpochIterator``)."""
    import importlib

    return importlib.import_module(_TRAINER)


def install(ctx: PatchContext) -> str:
    served = (f"{_TRAINER}.TensorFlowTrainer.predict: one in-memory batch (arrays or tensors, no steps or "
              "callbacks) runs the model's predict_function without an epoch iterator, the rest as before")

    def hook(trainer: ModuleType) -> None:
        if ctx.active:
            _serve(ctx, trainer)
            ctx.now(served)

    # Now if Keras's TensorFlow trainer is loaded, else once it is (a program that imports keras
    # first has TF's import finish inside Keras's own: the trainer cannot be imported from there).
    cancel = importhook.when_loaded((_TRAINER,), hook, f"{NAME} (Keras 3's predict)")
    if cancel is None:
        return served
    ctx.on_revert("the Keras trainer import hook", cancel)
    return served + " (from when Keras loads it)"


def _serve(ctx: PatchContext, trainer: ModuleType) -> None:
    import numpy as np
    import tensorflow as tf
    from keras.src import callbacks as callbacks_module, tree
    from keras.src.backend import config
    from keras.src.trainers.data_adapters import array_slicing, data_adapter_utils
    from keras.src.utils import traceback_utils

    if config.backend() != "tensorflow":
        raise RuntimeError(f"Keras 3 runs on the {config.backend()} backend, not TensorFlow's")
    trainer_cls = trainer.TensorFlowTrainer
    original = trainer_cls.predict
    parameters = tuple(inspect.signature(original).parameters)
    if parameters != _PREDICT_PARAMETERS:
        raise TypeError(f"TensorFlowTrainer.predict{parameters}: not the Keras 3 predict this patch knows")
    # What predict calls, looked up now: a Keras without one of them fails here, not in a user's loop.
    concat, to_numpy = trainer.potentially_ragged_concat, trainer.convert_to_np_if_not_ragged
    callback_list, pack = callbacks_module.CallbackList, data_adapter_utils.pack_x_y_sample_weight
    sliceable, lists_to_tuples = array_slicing.convert_to_sliceable, tree.lists_to_tuples
    map_structure, map_structure_up_to, flatten = tree.map_structure, tree.map_structure_up_to, tree.flatten
    async_wait = trainer.tf_context.async_wait
    if not hasattr(trainer_cls, "make_predict_function"):
        raise TypeError("TensorFlowTrainer has no make_predict_function: not the Keras 3 trainer this patch knows")
    max_steps = getattr(config, "max_steps_per_epoch", lambda: None)
    keras_distribution = _keras_distribution()

    def rows(leaf: Any) -> Optional[int]:
        """The first dimension of a dense in-memory array or eager tensor of a numeric or bool
        dtype; None for anything else (strings, objects, scalars, sparse, ragged, variables)."""
        if isinstance(leaf, np.ndarray):
            return leaf.shape[0] if leaf.ndim and leaf.dtype.kind in "biuf" else None
        if isinstance(leaf, tf.Tensor) and leaf.shape.rank and hasattr(leaf, "numpy"):
            dtype = leaf.dtype
            return leaf.shape[0] if dtype.is_floating or dtype.is_integer or dtype.is_bool else None
        return None

    def one_batch(model: Any, x: Any, batch_size: Any, steps: Any, callbacks: Any) -> Any:
        """The batch the epoch iterator would yield, where it yields exactly one; else None."""
        if steps is not None or callbacks is not None or not tf.executing_eagerly():
            return None
        size = batch_size or _DEFAULT_BATCH_SIZE
        if isinstance(size, bool) or not isinstance(size, numbers.Integral):
            return None
        if getattr(model, "steps_per_execution", 1) != 1 or max_steps():
            return None
        if tf.distribute.has_strategy() or getattr(model, "_distribute_strategy", None) is not None:
            return None
        if keras_distribution() is not None:
            return None
        leaves = flatten(x)
        counts = {rows(leaf) for leaf in leaves}
        if not leaves or len(counts) != 1:
            return None  # nothing, mixed row counts (Keras raises its own error), or not an array
        (count,) = counts
        if count is None or not 1 <= count <= size:
            return None
        inputs = lists_to_tuples(sliceable(pack(x, None, None), target_backend="tensorflow"))
        return map_structure(tf.convert_to_tensor, inputs)

    def served(model: Any, element: Any, verbose: Any) -> Any:
        """``predict``'s own steps for an epoch of one batch (keras/src/backend/tensorflow/trainer.py)."""
        callbacks = callback_list(None, add_progbar=verbose != 0, verbose=verbose, epochs=1, steps=1, model=model)
        model.make_predict_function()
        model.stop_predicting = False
        callbacks.on_predict_begin()
        callbacks.on_predict_batch_begin(0)
        batch_outputs = model.predict_function([element])
        outputs = map_structure(lambda batch_output: [batch_output], batch_outputs)
        callbacks.on_predict_batch_end(0, {"outputs": batch_outputs})
        async_wait()  # the epoch iterator's tf_sync
        callbacks.on_predict_end()
        outputs = map_structure_up_to(batch_outputs, concat, outputs)
        return map_structure(to_numpy, outputs)

    served = traceback_utils.filter_traceback(served)

    def arguments(x: Any, batch_size: Any = None, verbose: Any = "auto", steps: Any = None,
                  callbacks: Any = None) -> tuple:
        return x, batch_size, verbose, steps, callbacks

    def predict(self: Any, *args: Any, **kwargs: Any) -> Any:
        if ctx.active:  # reverted: a predict user code kept is Keras's own
            try:
                x, batch_size, verbose, steps, callbacks = arguments(*args, **kwargs)
            except TypeError:
                return original(self, *args, **kwargs)  # Keras's own error
            element = one_batch(self, x, batch_size, steps, callbacks)
            if element is not None:
                return served(self, element, verbose)
        return original(self, *args, **kwargs)

    ctx.replace_attribute(trainer_cls, "predict", predict)


def _keras_distribution() -> Any:
    """Keras's own distribution API's current setting (``keras.distribution``); None: none set."""
    try:
        from keras.src.distribution import distribution_lib
    except ImportError:
        return lambda: None
    return getattr(distribution_lib, "distribution", lambda: None)


# --- diagnose: the live signature ---------------------------------------------------------------
_SIGNATURE = Signature(
    unit="Keras 3 epoch iterators built by predict() for a model that predicted before (a tf.data pipeline each)",
    # Not a per-call leak: stock rises ≈14.5 MiB over the first 1,000 calls, then ≈0.2 MiB per
    # 1,000 (docs/measurements.md). Sized from RSS by the report where it grows.
    unit_bytes=lambda version: None, floor=20,
    fix="one in-memory batch served by the model's predict_function, without the pipeline (≈30× faster)",
    name="a new tf.data input pipeline built per Keras 3 predict() call (≈60 ms each on a small model)",
    code_fix=("in a loop over small in-memory batches call `model.predict_on_batch(x)` or "
              "`model(x, training=False)` instead of `model.predict(x)`"),
    upstream_fix="open upstream (keras-team/keras 13118)")


class PredictPipelines(Probe):
    """Epoch iterators (and their tf.data pipelines) that Keras 3's ``predict`` builds for a model
    that predicted before (a model's first predict is set-up: 60 models each predicting once are
    models in a loop, not this), counted where ``TFEpochIterator`` is made from ``predict``
    itself, eagerly: the patch's served calls make none."""

    def __init__(self) -> None:
        self._count = 0
        self._models: Any = weakref.WeakSet()  # models whose predict built a pipeline already

    def install(self, installer: Installer, executor: EagerExecutions) -> None:
        cancel = importhook.when_loaded((_TRAINER,), lambda trainer: self._wrap(installer, trainer),
                                        f"diagnose's {NAME} probe")
        if cancel is not None:
            installer.on_remove(cancel)

    def _wrap(self, installer: Installer, trainer: ModuleType) -> None:
        import tensorflow as tf

        if not installer.active:
            return
        iterator_cls = trainer.TFEpochIterator
        original = iterator_cls.__init__
        predict_file = trainer.__file__
        sites = self.sites

        def __init__(iterator_self: Any, *args: Any, **kwargs: Any) -> Any:
            if installer.active and tf.executing_eagerly():
                caller = sys._getframe(1).f_code
                if caller.co_name == "predict" and caller.co_filename == predict_file:
                    self._again(sys._getframe(1).f_locals.get("self"), sites)
            return original(iterator_self, *args, **kwargs)

        __init__.__wrapped__ = original  # type: ignore[attr-defined]
        installer.replace(iterator_cls, "__init__", __init__)

    def _again(self, model: Any, sites: Any) -> None:
        """Count the pipeline where ``model`` built one before; remember it otherwise."""
        try:
            if model in self._models:
                self._count += 1
                sites.hit()
            else:
                self._models.add(model)
        except TypeError:  # not weakly referable: counted, as a loop is the likelier case
            self._count += 1
            sites.hit()

    def count(self) -> int:
        return self._count


# --- canary: is the bug still upstream? ---------------------------------------------------------
def canary() -> Finding:
    import time

    import numpy as np
    import tensorflow as tf

    package, version = keras_in_use(tf.__version__)
    if package != "keras" or not (version or "").startswith("3."):
        return Finding(None, f"Keras 3 only; this build's tf.keras is {package} {version or 'none'}")
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    data = np.zeros((8, 4), np.float32)

    def best(call: Any) -> float:
        call()
        times = []
        for _ in range(15):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        return min(times)

    ratio = best(lambda: model.predict(data, verbose=0)) / best(lambda: model.predict_on_batch(data))
    # 3.15.1: ≈60–100× (a pipeline per call); fixed upstream it would be near 1×.
    return Finding(ratio > 10, f"predict takes {ratio:.0f}× predict_on_batch's time on one batch")


# --- the declaration (core/patch.py) -------------------------------------------------------------
PATCH = Patch(
    name=NAME,
    title="Keras 3 predict() in a loop: one in-memory batch without a tf.data pipeline per call",
    issue="https://github.com/keras-team/keras/issues/13118",
    gate=Gate(versions=">=2.16"),  # Keras 3 is tf.keras from TF 2.16; the precondition reads which Keras
    precondition=precondition,
    install=install,
    signature=_SIGNATURE,
    probe=PredictPipelines,
    canary=canary,
)
