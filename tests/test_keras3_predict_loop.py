"""keras3_predict_loop (keras 13118 on Keras 3) on real TensorFlow. Where it applies (TF >= 2.16
with Keras 3 as tf.keras: the 2.21 leg), predict on one in-memory batch builds no epoch iterator,
its outputs are bit-identical to stock Keras's in another fresh process (values, dtypes, shapes,
structures, progress bar, errors), every other call goes through Keras's own iterator, and a
predict loop stops rising. Where it does not (Keras 2: the 2.12 leg), it stays out with its reason."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import pytest

import tf_patches
from tf_patches.core.environment import detect
from tf_patches.patches import keras3_predict_loop as patch

from .fresh import run_fresh, unpatched_and_patched

NAME = patch.PATCH.name
_HERE = detect()
APPLIES_HERE = bool(patch.PATCH.gate.check(_HERE)[0]) and patch.precondition(_HERE, {}) is None


def test_status_here(tf):
    row = tf_patches.apply_all(only=[NAME])[NAME]
    if APPLIES_HERE:
        trainer = patch.trainer_module().TensorFlowTrainer
        assert row.status == "applied", row
        assert trainer.predict.__tf_patches__ == NAME
        original = trainer.predict.__wrapped__
        tf_patches.revert_all()
        assert vars(trainer)["predict"] is original
    else:  # the 2.12 leg: Keras 2
        assert row.status == "skipped", row
        assert row.reason == f"TensorFlow {tf.__version__} is outside >=2.16", row


def test_skipped_under_the_legacy_switch_and_on_unmeasured_keras(tf, monkeypatch):
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    row = tf_patches.apply_all(only=[NAME], env={"distribution": "tensorflow", "version": "2.21.0"})[NAME]
    assert row.status == "skipped" and "keras2_predict_loop serves it" in row.reason, row
    monkeypatch.delenv("TF_USE_LEGACY_KERAS")
    monkeypatch.setattr(patch, "keras_in_use", lambda version: ("keras", "3.2.1"))
    row = tf_patches.apply_all(only=[NAME], env={"distribution": "tensorflow", "version": "2.21.0"})[NAME]
    assert (row.status, row.reason) == ("skipped", "Keras 3.2.1: outputs checked bit-identical on Keras 3.3–3.15 only")
    monkeypatch.setattr(patch, "keras_in_use", lambda version: ("keras", "3.9.2"))
    assert tf_patches.apply_all(only=[NAME], env={"distribution": "tensorflow", "version": "2.21.0"})[NAME].status \
        in ("applied", "pending")
    tf_patches.revert_all()
    monkeypatch.setattr(patch, "keras_in_use", lambda version: ("keras", "2.15.0"))
    row = tf_patches.apply_all(only=[NAME], env={"distribution": "tensorflow", "version": "2.21.0"})[NAME]
    assert (row.status, row.reason) == ("skipped", "Keras 2.15.0 is not Keras 3")


# -- equivalence: one fresh process stock, one patched, the same cases ---------------------------
# Each case: (name, statement making `model`, expression for the predict call). Values are hashed
# bit for bit with dtype, shape and the output's structure; `iterators` counts TFEpochIterator
# constructions during the call (Keras's own path builds one, the served path none).
CASES = r"""
import hashlib, io, contextlib, json, re, sys
import numpy as np
import tf_patches
if PATCHED:
    tf_patches.apply_all(only=["keras3_predict_loop"])
import tensorflow as tf
import keras
from keras.src.backend.tensorflow import trainer as trainer_module

built = []
original_init = trainer_module.TFEpochIterator.__init__
def counting_init(self, *args, **kwargs):
    built.append(1)
    return original_init(self, *args, **kwargs)
trainer_module.TFEpochIterator.__init__ = counting_init

def describe(value):
    if isinstance(value, dict):
        return {"dict": {key: describe(value[key]) for key in value}, "keys": list(value)}
    if isinstance(value, (list, tuple)):
        return {type(value).__name__: [describe(item) for item in value]}
    if isinstance(value, np.ndarray):
        return [str(value.dtype), list(value.shape), hashlib.sha256(value.tobytes()).hexdigest()[:20]]
    return repr(type(value))

def seeded(make):
    keras.utils.set_random_seed(7)
    return make()

def dense():
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"),
                             keras.layers.BatchNormalization(), keras.layers.Dropout(0.5), keras.layers.Dense(3)])

def two_in_two_out():
    a, b = keras.Input((4,), name="a"), keras.Input((2,), name="b")
    h = keras.layers.Concatenate()([keras.layers.Dense(5)(a), b])
    return keras.Model({"b": b, "a": a}, {"z": keras.layers.Dense(2, name="z")(h),
                                          "y": keras.layers.Dense(1, name="y")(h)})

def list_in_list_out():
    a, b = keras.Input((4,)), keras.Input((2,))
    h = keras.layers.Concatenate()([a, b])
    return keras.Model([a, b], [keras.layers.Dense(2)(h), keras.layers.Dense(3, dtype="float64")(h)])

def embedding():
    return keras.Sequential([keras.Input((6,), dtype="int32"), keras.layers.Embedding(20, 4),
                             keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(2)])

class Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(3)
    def call(self, x, training=False):
        return self.dense(x) * (2.0 if training else 1.0)

def eager_model():
    model = dense()
    model.compile(run_eagerly=True)
    return model

def jit_model():
    model = dense()
    model.compile(jit_compile=True)
    return model

rng = np.random.default_rng(13118)
x8 = rng.random((8, 4), dtype=np.float32)
x8_64 = rng.random((8, 4))
x32 = rng.random((32, 4), dtype=np.float32)
x33 = rng.random((33, 4), dtype=np.float32)
b8 = rng.random((8, 2), dtype=np.float32)
ints = rng.integers(0, 20, (5, 6)).astype(np.int32)
models = {"dense": seeded(dense), "two": seeded(two_in_two_out), "lists": seeded(list_in_list_out),
          "embedding": seeded(embedding), "subclassed": seeded(Subclassed), "eager": seeded(eager_model),
          "jit": seeded(jit_model)}
models["subclassed"](x8)

def generator():
    yield (x8,)

calls = {
    # served: one in-memory batch
    "float32 array": ("dense", lambda m: m.predict(x8, verbose=0)),
    "float64 array (cast to floatx)": ("dense", lambda m: m.predict(x8_64, verbose=0)),
    "eager tensor": ("dense", lambda m: m.predict(tf.constant(x8), verbose=0)),
    "float64 eager tensor": ("dense", lambda m: m.predict(tf.constant(x8_64), verbose=0)),
    "32 rows, default batch": ("dense", lambda m: m.predict(x32, verbose=0)),
    "8 rows, batch_size=8": ("dense", lambda m: m.predict(x8, batch_size=8, verbose=0)),
    "positional arguments": ("dense", lambda m: m.predict(x8, 16, 0)),
    "one row": ("dense", lambda m: m.predict(x8[:1], verbose=0)),
    "dict in, dict out": ("two", lambda m: m.predict({"a": x8, "b": b8}, verbose=0)),
    "dict of tensors": ("two", lambda m: m.predict({"b": tf.constant(b8), "a": tf.constant(x8)}, verbose=0)),
    "list in, list out (float64 head)": ("lists", lambda m: m.predict([x8, b8], verbose=0)),
    "int32 ids": ("embedding", lambda m: m.predict(ints, verbose=0)),
    "int64 ids": ("embedding", lambda m: m.predict(ints.astype(np.int64), verbose=0)),
    "subclassed, training arg": ("subclassed", lambda m: m.predict(x8, verbose=0)),
    "run_eagerly": ("eager", lambda m: m.predict(x8, verbose=0)),
    "jit_compile": ("jit", lambda m: m.predict(x8, verbose=0)),
    "again after other shapes": ("dense", lambda m: m.predict(x8, verbose=0)),
    # not served: Keras's own path
    "33 rows (two batches)": ("dense", lambda m: m.predict(x33, verbose=0)),
    "8 rows, batch_size=4": ("dense", lambda m: m.predict(x8, batch_size=4, verbose=0)),
    "steps=1": ("dense", lambda m: m.predict(x8, steps=1, verbose=0)),
    "callbacks": ("dense", lambda m: m.predict(x8, verbose=0, callbacks=[keras.callbacks.LambdaCallback()])),
    "tf.data.Dataset": ("dense", lambda m: m.predict(tf.data.Dataset.from_tensor_slices(x8).batch(8), verbose=0)),
    "generator": ("dense", lambda m: m.predict(generator(), verbose=0)),
}
result = {}
for name, (model_name, call) in calls.items():
    built.clear()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        value = call(models[model_name])
    result[name] = {"value": describe(value), "iterators": len(built), "printed": out.getvalue()}

def progress(verbose):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        models["dense"].predict(x8, verbose=verbose)
    # Timings vary run to run, and with them the backspaces that erase them and the spaces that pad
    # a shorter line over a longer one.
    text = re.sub(r"\d+[mu]?s(/step)?", "T", re.sub(r"\x1b\[[0-9;]*m|\x08", "", out.getvalue()))
    return re.sub(r" +\n", "\n", text)

result["progress bar"] = {"auto": progress("auto"), "1": progress(1), "2": progress(2), "0": progress(0)}
errors = {}
for name, call in {"wrong width": lambda: models["dense"].predict(x8[:, :3], verbose=0),
                   "mixed rows": lambda: models["two"].predict({"a": x8, "b": b8[:5]}, verbose=0),
                   "unknown keyword": lambda: models["dense"].predict(x8, verbos=0)}.items():
    try:
        call()
        errors[name] = None
    except Exception as exc:
        errors[name] = type(exc).__name__
result["errors"] = errors
print(json.dumps(result))
"""
SERVED = ("float32 array", "float64 array (cast to floatx)", "eager tensor", "float64 eager tensor",
          "32 rows, default batch", "8 rows, batch_size=8", "positional arguments", "one row", "dict in, dict out",
          "dict of tensors", "list in, list out (float64 head)", "int32 ids", "int64 ids",
          "subclassed, training arg", "run_eagerly", "jit_compile", "again after other shapes")
NOT_SERVED = ("33 rows (two batches)", "8 rows, batch_size=4", "steps=1", "callbacks", "tf.data.Dataset",
              "generator")


@pytest.fixture(scope="module")
def stock_and_patched():
    if not APPLIES_HERE:  # the cases are Keras 3's (keras.src.backend.tensorflow.trainer)
        pytest.skip("Keras 3 as tf.keras only: on Keras 2 this patch is skipped (test_status_here)")
    with ThreadPoolExecutor(2) as pool:
        return tuple(pool.map(lambda on: run_fresh(f"PATCHED = {on}\n" + CASES), (False, True)))


def test_outputs_bit_identical_to_stock(stock_and_patched):
    stock, patched = stock_and_patched
    assert set(stock) == set(SERVED + NOT_SERVED + ("progress bar", "errors"))
    for name in SERVED + NOT_SERVED:
        assert patched[name]["value"] == stock[name]["value"], name
        assert patched[name]["printed"] == stock[name]["printed"] == "", name
    assert stock["dict in, dict out"]["value"]["keys"] == patched["dict in, dict out"]["value"]["keys"]
    assert stock["list in, list out (float64 head)"]["value"]["list"][1][0] == "float64"


def test_one_batch_is_served_without_an_epoch_iterator_and_the_rest_is_keras_own(stock_and_patched):
    stock, patched = stock_and_patched
    assert all(stock[name]["iterators"] == 1 for name in SERVED + NOT_SERVED), stock
    served = {name: patched[name]["iterators"] for name in SERVED}
    keras_own = {name: patched[name]["iterators"] for name in NOT_SERVED}
    if APPLIES_HERE:
        assert set(served.values()) == {0}, served
    else:
        assert set(served.values()) == {1}, served
    assert set(keras_own.values()) == {1}, keras_own


def test_progress_bar_and_errors_as_stock(stock_and_patched):
    stock, patched = stock_and_patched
    assert patched["progress bar"] == stock["progress bar"]
    assert stock["progress bar"]["0"] == "" and re.search(r"1/1 ━+ T T", stock["progress bar"]["auto"])
    assert patched["errors"] == stock["errors"]
    assert all(stock["errors"].values()) and stock["errors"]["unknown keyword"] == "TypeError", stock["errors"]


# -- growth -------------------------------------------------------------------------------------
CALLS = 200  # stock, TF 2.21 + Keras 3.15.1: +3.1 MiB over these after the first call (≈60–250 ms a call); patched 0.14
BOUND_MIB = 1.0
MODEL = """
    import numpy as np
    import keras
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(4)])
    x = np.random.default_rng(0).random((32, 16), dtype=np.float32)
"""


def test_predict_loop_stops_rising():
    unpatched, patched = unpatched_and_patched(NAME, "model.predict(x, verbose=0)", setup=MODEL,
                                               calls=CALLS, warmup=1)
    if APPLIES_HERE:
        assert patched.status == "applied"
        assert unpatched.growth_mib > 2 * BOUND_MIB, f"the unpatched loop should rise: {unpatched}"
        assert patched.growth_mib < BOUND_MIB, f"patched loop grew: {patched} (unpatched {unpatched})"
        print(f"unpatched {unpatched.growth_mib:.2f} MiB, patched {patched.growth_mib:.2f} MiB")
    else:
        assert patched.status == "skipped"


# -- diagnose -----------------------------------------------------------------------------------
def _predict_loop_counted(tf, calls: int) -> tuple:
    """A diagnosis around ``calls`` predicts (plus calls that build no predict pipeline): the
    probe's count, its leak row (None: not named) and the line it names."""
    import warnings

    import keras
    import numpy as np

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(loss="mse")
    x, y = np.ones((8, 4), np.float32), np.ones((8, 2), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with tf_patches.diagnose() as diagnosis:
            for _ in range(calls):
                model.predict(x, verbose=0)  # PREDICT LINE
            model.predict_on_batch(x)
            model.evaluate(x, y, verbose=0)  # an epoch iterator, not predict's
            for _ in range(3):  # models predicting once each: set-up (models in a loop), not counted
                keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]).predict(x, verbose=0)
    snapshot = diagnosis.snapshot()
    if NAME not in snapshot.signatures:
        return None, None, None
    count = snapshot.counts()[NAME]
    found = [leak for leak in diagnosis.report().leaks if leak.patch == NAME]
    return count, (found[0] if found else None), (found[0].sites[0] if found and found[0].sites else None)


def test_diagnose_counts_the_pipelines_predict_builds_and_none_once_served(tf):
    if not APPLIES_HERE:
        assert _predict_loop_counted(tf, 1) == (None, None, None)  # not armed on Keras 2
        return
    iterator = patch.trainer_module().TFEpochIterator
    init = vars(iterator)["__init__"]
    count, leak, site = _predict_loop_counted(tf, 25)
    assert vars(iterator)["__init__"] is init  # the probe is gone after the block
    assert count == 24 and leak is not None, (count, leak)  # the first predict of the model is set-up
    assert leak.fix_python == "import tf_patches; tf_patches.apply_all()" and "predict_on_batch" in leak.code_fix
    line = next(number for number, text in enumerate(open(__file__), 1) if "# PREDICT LINE" in text)
    assert site[:2] == [__file__, line] and site[3] == 24, site
    tf_patches.apply_all(only=[NAME])
    try:
        count, leak, _ = _predict_loop_counted(tf, 25)
    finally:
        tf_patches.revert_all()
    assert (count, leak) == (0, None)
