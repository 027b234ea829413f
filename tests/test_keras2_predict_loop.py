"""keras2_predict_loop (TF issue 58676) on real TensorFlow. Where it applies (Keras 2, TF < 2.15:
the 2.12 leg), a predict loop on one in-memory batch stops growing, predictions stay bit-identical
through the same traced predict_function, and every other input keeps Keras's own pipeline. Where
it does not (Keras 3, TF 2.16+: the 2.21 leg), it stays out with its reason, predict is untouched
and needs nothing. Each test asserts what holds on the leg it runs on; none is skipped."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List

import numpy as np
import pytest

import tf_patches
from tf_patches.core import keras as keras_reader
from tf_patches.core.environment import detect
from tf_patches.patches import keras2_predict_loop as patch

from .fresh import run_fresh, unpatched_and_patched

NAME = patch.PATCH.name
_HERE = detect()
# True on the 2.12 leg, False on the 2.21 leg; the first test checks it against apply_all().
APPLIES_HERE = bool(patch.PATCH.gate.check(_HERE)[0]) and patch.precondition(_HERE, {}) is None
RNG = np.random.default_rng(58676)
X8 = RNG.random((8, 4), dtype=np.float32)
B8 = RNG.random((8, 2), dtype=np.float32)


# -- gate ---------------------------------------------------------------------------------------
def test_status_here_and_nothing_but_the_adapter_is_touched(tf):
    predict = tf.keras.Model.predict
    row = tf_patches.apply_all(only=[NAME])[NAME]
    assert tf.keras.Model.predict is predict
    if APPLIES_HERE:  # Keras 2: the adapter's __init__ is wrapped, and revert restores it
        adapter = patch.adapter_module().TensorLikeDataAdapter
        assert row.status == "applied", row
        assert adapter.__init__.__tf_patches__ == NAME
        original = adapter.__init__.__wrapped__
        tf_patches.revert_all()
        assert vars(adapter)["__init__"] is original
    else:  # the 2.21 leg, without the legacy switch: tf.keras is Keras 3, and the reason says so
        assert row.status == "skipped", row
        assert re.match(rf"TensorFlow {re.escape(tf.__version__)} with Keras 3\.\S+: tf\.keras is Keras 3, "
                        r"which has no TensorLikeDataAdapter and whose predict does not leak", row.reason), row


def test_skipped_for_an_injected_tf_2_15_1(tf):
    row = tf_patches.apply_all(only=[NAME], env={"distribution": "tensorflow", "version": "2.15.1"})[NAME]
    assert (row.status, row.reason) == ("skipped", "TensorFlow 2.15.1 is outside >=2.6,!=2.15.*")
    if APPLIES_HERE:
        assert not hasattr(patch.adapter_module().TensorLikeDataAdapter.__init__, "__tf_patches__")


def test_the_keras_in_use_decides_from_tf_2_16(tf, monkeypatch):
    """TF >= 2.16: tf_keras under TF's own legacy switch values, else the keras package (Keras 3)."""
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    assert patch.keras_in_use("2.16.1") == ("keras", patch.keras_version())
    injected = {"distribution": "tensorflow", "version": "2.16.1"}
    row = tf_patches.apply_all(only=[NAME], env=injected)[NAME]
    expected = "a pairing TF >= 2.16 does not ship" if patch.keras_version().startswith("2.") else "tf.keras is Keras 3"
    assert row.status == "skipped" and expected in row.reason, row
    for value in ("1", "true", "True"):
        monkeypatch.setenv("TF_USE_LEGACY_KERAS", value)
        assert patch.keras_in_use("2.16.1")[0] == "tf_keras"
        assert patch.keras_in_use("2.14.1")[0] == "keras"  # no switch before 2.16 (TF 2.15 is gated out)
    for value in ("0", "yes", ""):
        monkeypatch.setenv("TF_USE_LEGACY_KERAS", value)
        assert patch.keras_in_use("2.21.0")[0] == "keras"
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    monkeypatch.setattr(keras_reader, "TF_KERAS_DISTRIBUTIONS", ("no-such-tf-keras",))  # tf_keras absent
    row = tf_patches.apply_all(only=[NAME], env=injected)[NAME]
    assert row.status == "skipped" and row.reason.startswith("TF_USE_LEGACY_KERAS asks for tf_keras, "
                                                             "which is not installed"), row


def test_keras3_is_the_reason_when_tf_is_old_enough(tf):
    import keras

    assert patch.keras_version() == keras.__version__
    row = tf_patches.apply_all(only=[NAME], env={"distribution": "tensorflow", "version": "2.14.1"})[NAME]
    if keras.__version__.startswith("2."):
        assert row.status == "applied", row
    else:
        assert row.status == "skipped", row
        assert row.reason.startswith(f"TensorFlow 2.14.1 with Keras {keras.__version__}: tf.keras is Keras 3"), row


# -- leak ---------------------------------------------------------------------------------------
CALLS = 150  # 2.12.1: +36 MiB unpatched (+111 MiB per 500 measured), ≈0 patched
LEAK_MIB = 20
BOUND_MIB = 10  # 2.21: ≈3 MiB per 150 calls without any patch (≤ 19 MB per 1,500, docs/measurements.md)
MODEL = """
    import numpy as np
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    x = np.random.default_rng(0).random((8, 4), dtype=np.float32)
"""


def test_predict_loop_grows_only_on_unpatched_keras2():
    unpatched, patched = unpatched_and_patched(patch.PATCH.name, "model.predict(x, verbose=0)", setup=MODEL,
                                               calls=CALLS, warmup=20)  # warm-up: traces, allocator pools
    if APPLIES_HERE:
        assert unpatched.growth_mib > LEAK_MIB, f"the unpatched loop should leak: {unpatched}"
        assert patched.status == "applied"
    else:
        assert patched.status == "skipped"
        assert unpatched.growth_mib < BOUND_MIB, f"Keras 3's predict loop grew: {unpatched}"
    assert patched.growth_mib < BOUND_MIB, f"patched loop grew: {patched} (unpatched {unpatched})"


# -- equivalence --------------------------------------------------------------------------------
def _model(tf: Any, outputs: int = 1) -> Any:
    """Dense, batch norm and dropout: predict must run them in inference mode."""
    inputs = tf.keras.Input((4,))
    hidden = tf.keras.layers.Dense(16, activation="relu")(inputs)
    hidden = tf.keras.layers.Dropout(0.5)(tf.keras.layers.BatchNormalization()(hidden))
    heads = [tf.keras.layers.Dense(3)(hidden) for _ in range(outputs)]
    return tf.keras.Model(inputs, heads if outputs > 1 else heads[0])


def _two_inputs(tf: Any) -> Any:
    a, b = tf.keras.Input((4,), name="a"), tf.keras.Input((2,), name="b")
    merged = tf.keras.layers.Concatenate()([a, tf.keras.layers.Dense(4)(b)])
    return tf.keras.Model({"a": a, "b": b}, tf.keras.layers.Dense(2)(merged))


class Recorder:
    """A callback that keeps what predict shows callbacks."""

    def __init__(self, tf: Any):
        recorder = self
        self.events: List[Any] = []

        class Callback(tf.keras.callbacks.Callback):
            def on_predict_begin(self, logs=None):
                recorder.events.append("begin")

            def on_predict_batch_end(self, batch, logs=None):
                recorder.events.append((batch, tf.nest.map_structure(np.asarray, logs["outputs"])))

            def on_predict_end(self, logs=None):
                recorder.events.append("end")

        self.callback = Callback()


@dataclass
class Case:
    routed: bool  # one in-memory batch: served by the single-batch dataset where the patch applies
    model: Callable[[Any], Any] = _model
    x: Callable[[Any], Any] = lambda tf: X8
    kwargs: Dict[str, Any] = field(default_factory=lambda: {"verbose": 0})
    strategy: bool = False


X33 = RNG.random((33, 4), dtype=np.float32)
CASES = {
    "numpy float32, 8 rows": Case(True),
    "numpy float64, cast to floatx": Case(True, x=lambda tf: X8.astype(np.float64)),
    "eager tensor": Case(True, x=lambda tf: tf.constant(X8)),
    "32 rows, a full default batch": Case(True, x=lambda tf: X33[:32]),
    "one row": Case(True, x=lambda tf: X8[:1]),
    "batch_size equal to the rows": Case(True, kwargs={"batch_size": 8, "verbose": 0}),
    "two inputs in a dict": Case(True, model=_two_inputs,
                                 x=lambda tf: {"a": X8, "b": B8}),
    "two outputs": Case(True, model=lambda tf: _model(tf, outputs=2)),
    "progress bar": Case(True, kwargs={"verbose": 1}),
    "callbacks": Case(True, kwargs={"verbose": 0, "callbacks": "recorder"}),
    "steps_per_execution 4": Case(True, model=lambda tf: _compiled(tf, steps_per_execution=4)),
    "33 rows, two batches": Case(False, x=lambda tf: X33),
    "steps given": Case(False, kwargs={"steps": 1, "verbose": 0}),
    "tf.data dataset": Case(False, x=lambda tf: tf.data.Dataset.from_tensor_slices(X8).batch(8)),
    "generator": Case(False, x=lambda tf: ((X8[i:i + 4],) for i in (0, 4))),
    "distribution strategy": Case(False, strategy=True),
}


def _compiled(tf: Any, **compile_kwargs: Any) -> Any:
    model = _model(tf)
    model.compile(loss="mse", **compile_kwargs)
    return model


def _flat_bytes(tf: Any, outputs: Any) -> List[Any]:
    return [(a.dtype, a.shape, a.tobytes()) for a in map(np.asarray, tf.nest.flatten(outputs))]


@pytest.fixture
def decisions(monkeypatch) -> List[Any]:
    """Every routing decision the patch takes, with the adapter it was taken for."""
    made: List[Any] = []
    decide = patch.single_batch

    def spy(arguments, tf, np):
        batch = decide(arguments, tf, np)
        made.append((dict(arguments), batch))
        return batch

    monkeypatch.setattr(patch, "single_batch", spy)
    return made


def _assert_same_adapter(tf: Any, arguments: Dict[str, Any]) -> None:
    """The routed adapter against one built by Keras's own __init__ from the same arguments."""
    routed, extra = arguments.pop("self"), arguments.pop("kwargs", {})
    adapter = patch.adapter_module().TensorLikeDataAdapter
    stock = adapter.__new__(adapter)
    adapter.__init__.__wrapped__(stock, **arguments, **extra)
    assert vars(stock).keys() == vars(routed).keys()
    facts = lambda a: (a.get_size(), a.batch_size(), a.has_partial_batch(), a.partial_batch_size(),
                       a.get_samples(), a.should_recreate_iterator())
    assert facts(routed) == facts(stock)
    ours, theirs = routed.get_dataset(), stock.get_dataset()
    assert ours.element_spec == theirs.element_spec
    untuned = tf.data.Options()
    untuned.autotune.enabled = False  # the one option the patch adds: one batch has nothing to tune
    assert ours.options() == theirs.options().merge(untuned)
    assert [_flat_bytes(tf, e) for e in ours] == [_flat_bytes(tf, e) for e in theirs]


def _without_timings(printed: str) -> str:
    """Keras's progress bar pads a line to the width of the one it overwrites, so a "12ms/step" after
    a "8ms/step" adds a space: timings and the padding they cause are not what is compared."""
    return re.sub(r"[ \b]+", " ", re.sub(r"\d+(?:\.\d+)?[mµ]?s", "T", printed)).strip()


@pytest.mark.parametrize("name", sorted(CASES))
def test_predictions_are_bit_identical_and_only_one_in_memory_batch_is_rerouted(tf, name, decisions, capsys):
    case = CASES[name]
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0") if case.strategy else tf.distribute.get_strategy()
    with strategy.scope():
        model = case.model(tf)
    recorder = Recorder(tf)

    def predict() -> Any:
        kwargs = dict(case.kwargs)
        if kwargs.get("callbacks") == "recorder":
            kwargs["callbacks"] = [recorder.callback]
        return model.predict(case.x(tf), **kwargs)

    expected = _flat_bytes(tf, predict())
    printed = capsys.readouterr().out
    events, recorder.events = recorder.events, []
    traces = model.predict_function.experimental_get_tracing_count()
    assert tf_patches.apply_all(only=[NAME]).status(NAME) == ("applied" if APPLIES_HERE else "skipped")
    assert _flat_bytes(tf, predict()) == expected
    assert model.predict_function.experimental_get_tracing_count() == traces  # the same traced graph
    assert _without_timings(capsys.readouterr().out) == _without_timings(printed)
    assert [_flat_bytes(tf, e) if isinstance(e, tuple) else e for e in recorder.events] == \
           [_flat_bytes(tf, e) if isinstance(e, tuple) else e for e in events]
    routed = [arguments for arguments, batch in decisions if batch is not None]
    assert len(routed) == (1 if case.routed and APPLIES_HERE else 0), decisions
    for arguments in routed:
        _assert_same_adapter(tf, arguments)


def test_fit_and_evaluate_with_targets_keep_kerass_pipeline(tf, decisions):
    model = _compiled(tf)
    y = RNG.random((8, 3), dtype=np.float32)
    tf_patches.apply_all(only=[NAME])
    model.fit(X8, y, epochs=1, verbose=0)
    model.evaluate(X8, y, verbose=0)
    assert [batch for _, batch in decisions] == ([None, None] if APPLIES_HERE else [])


# -- tf_keras (Keras 2 after TF 2.15) under TF_USE_LEGACY_KERAS=1, in one fresh process -------------
# What it checks on each leg: TF >= 2.16 with tf-keras installed (the newest leg: scripts/dev.sh puts
# tf-keras in it): applied to tf_keras's adapter, predictions bit-identical to stock through the same
# traced predict_function, one pipeline per stock predict as diagnose counts them and none patched;
# TF >= 2.16 without tf-keras (the Python 3.13 leg): skipped, saying tf_keras is not installed; TF
# < 2.16 (the 2.12 leg): the switch is not TF's there, Keras 2 itself is served.
LEGACY = """
import json
import numpy as np
import tf_patches
import tensorflow as tf
from tf_patches.patches import keras2_predict_loop as patch

out = {"in_use": patch.keras_in_use(tf.__version__), "tf": tf.__version__}
row = tf_patches.apply_all(only=[patch.PATCH.name])[patch.PATCH.name]
tf_patches.revert_all()
out["status"], out["reason"] = row.status, row.reason
if row.status == "applied":
    out["keras"] = tf.keras.Model.__module__.split(".")[0]
    rng = np.random.default_rng(58676)
    x8, b8, x33 = (rng.random(shape, dtype=np.float32) for shape in ((8, 4), (8, 2), (33, 4)))

    def dense(outputs=1):
        inputs = tf.keras.Input((4,))
        hidden = tf.keras.layers.Dense(16, activation="relu")(inputs)
        hidden = tf.keras.layers.Dropout(0.5)(tf.keras.layers.BatchNormalization()(hidden))
        heads = [tf.keras.layers.Dense(3)(hidden) for _ in range(outputs)]
        return tf.keras.Model(inputs, heads if outputs > 1 else heads[0])

    a, b = tf.keras.Input((4,), name="a"), tf.keras.Input((2,), name="b")
    merged = tf.keras.layers.Concatenate()([a, tf.keras.layers.Dense(4)(b)])
    two_inputs = tf.keras.Model({"a": a, "b": b}, tf.keras.layers.Dense(2)(merged))
    one, two = dense(), dense(outputs=2)
    cases = {  # name: (model, inputs, routed by the patch)
        "numpy float32": (one, x8, True), "numpy float64": (one, x8.astype(np.float64), True),
        "eager tensor": (one, tf.constant(x8), True), "one row": (one, x8[:1], True),
        "two outputs": (two, x8, True), "two inputs": (two_inputs, {"a": x8, "b": b8}, True),
        "33 rows, two batches": (one, x33, False),
    }

    def predictions():
        flat = lambda o: [(str(v.dtype), v.shape, v.tobytes()) for v in map(np.asarray, tf.nest.flatten(o))]
        return {name: repr(flat(m.predict(x, verbose=0))) for name, (m, x, _) in cases.items()}

    def pipelines(program):
        with tf_patches.diagnose() as diagnosis:
            program()
        snapshot = diagnosis.snapshot()
        return snapshot.counts().get(patch.PATCH.name)

    routed = [name for name, (_, _, on) in cases.items() if on]
    predict_routed = lambda: [cases[n][0].predict(cases[n][1], verbose=0) for n in routed for _ in range(3)]
    stock = predictions()
    traces = {n: m.predict_function.experimental_get_tracing_count() for n, (m, _, _) in cases.items()}
    out["stock_pipelines"] = pipelines(predict_routed)
    adapter = patch.adapter_module().TensorLikeDataAdapter
    original = vars(adapter)["__init__"]
    out["applied"] = tf_patches.apply_all(only=[patch.PATCH.name]).status(patch.PATCH.name)
    out["adapter"] = adapter.__module__
    out["wrapped"] = getattr(adapter.__init__, "__tf_patches__", None)
    out["identical"] = {n: v == stock[n] for n, v in predictions().items()}
    out["retraced"] = [n for n, (m, _, _) in cases.items()
                       if m.predict_function.experimental_get_tracing_count() != traces[n]]
    out["patched_pipelines"] = pipelines(predict_routed)
    out["unrouted_pipelines"] = pipelines(lambda: one.predict(x33, verbose=0))
    tf_patches.revert_all()
    out["restored"] = vars(adapter)["__init__"] is original
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def legacy(tf):
    """The fresh process with TF_USE_LEGACY_KERAS=1, shared by the checks below."""
    return run_fresh(LEGACY, env={"TF_USE_LEGACY_KERAS": "1"})


def _release(tf: Any) -> tuple:
    return tuple(int(part) for part in tf.__version__.split(".")[:2])


def test_legacy_switch_serves_the_keras_2_in_use(tf, legacy):
    if _release(tf) < (2, 16):  # TF's loader reads no switch: its own Keras 2 package is served
        assert legacy["in_use"][0] == "keras" and (legacy["status"] == "applied") == APPLIES_HERE, legacy
    elif importlib.util.find_spec("tf_keras") is None:
        assert legacy["status"] == "skipped", legacy
        assert legacy["reason"].startswith("TF_USE_LEGACY_KERAS asks for tf_keras, which is not installed"), legacy
    else:
        assert legacy["in_use"] == ["tf_keras", importlib.metadata.version("tf-keras")], legacy
        assert legacy["status"] == legacy["applied"] == "applied", legacy
        assert legacy["reason"].startswith("tf_keras.src.engine.data_adapter.TensorLikeDataAdapter"), legacy
        assert legacy["keras"] == "tf_keras" and legacy["adapter"].startswith("tf_keras."), legacy
        assert legacy["wrapped"] == NAME and legacy["restored"], legacy


def test_legacy_predictions_are_bit_identical_through_the_same_trace(legacy):
    if legacy["status"] != "applied":
        return  # what this leg serves is checked above (and on the 2.12 leg, in this process)
    assert legacy["identical"] and all(legacy["identical"].values()), legacy["identical"]
    assert legacy["retraced"] == [], legacy


def test_legacy_predict_builds_no_pipeline_patched(legacy):
    """The leak's unit, as diagnose counts it: one tf.data pipeline per stock predict (tf-keras 2.21:
    ≈1 KiB and ≈70 ms a call, docs/findings/keras_predict_loops.md), none for a patched one."""
    if legacy["status"] != "applied":
        return
    assert legacy["stock_pipelines"] == 6 * 3, legacy  # 6 routed cases, 3 predicts each
    assert legacy["patched_pipelines"] == 0, legacy
    assert legacy["unrouted_pipelines"] == 1, legacy  # two batches: Keras's own pipeline, counted


# -- the routing rule itself, on any Keras --------------------------------------------------------
RULE = {  # arguments as TensorLikeDataAdapter receives them → (rows, batch_size) or None
    "numpy, default batch": (lambda tf: {"x": X8}, (8, 32)),
    "numpy, batch_size given": (lambda tf: {"x": X8, "batch_size": 8}, (8, 8)),
    "tensor, shuffle False, one epoch": (lambda tf: {"x": tf.constant(X8), "shuffle": False, "epochs": 1}, (8, 32)),
    "nested structure": (lambda tf: {"x": ({"a": X8}, [tf.ones([8])])}, (8, 32)),
    "targets": (lambda tf: {"x": X8, "y": X8}, None),
    "sample weights": (lambda tf: {"x": X8, "sample_weights": np.ones(8)}, None),
    "sample weight modes": (lambda tf: {"x": X8, "sample_weight_modes": "temporal"}, None),
    "steps": (lambda tf: {"x": X8, "steps": 1}, None),
    "two epochs": (lambda tf: {"x": X8, "epochs": 2}, None),
    "shuffle": (lambda tf: {"x": X8, "shuffle": True}, None),
    "batch shuffle": (lambda tf: {"x": X8, "shuffle": "batch"}, None),
    "more rows than the batch": (lambda tf: {"x": X8, "batch_size": 7}, None),
    "no rows": (lambda tf: {"x": X8[:0]}, None),
    "a scalar": (lambda tf: {"x": np.float32(1)}, None),
    "a 0-d array": (lambda tf: {"x": np.array(1.0)}, None),
    "rows that differ": (lambda tf: {"x": (X8, X8[:4])}, None),
    "batch_size True": (lambda tf: {"x": X8, "batch_size": True}, None),
    "batch_size 8.0": (lambda tf: {"x": X8, "batch_size": 8.0}, None),
    "a list of Python floats": (lambda tf: {"x": [1.0, 2.0]}, None),
    "a variable": (lambda tf: {"x": tf.Variable(X8)}, None),
    "a sparse tensor": (lambda tf: {"x": tf.sparse.from_dense(X8)}, None),
    "a ragged tensor": (lambda tf: {"x": tf.ragged.constant([[1.0], [2.0, 3.0]])}, None),
    "nothing": (lambda tf: {"x": ()}, None),
}


@pytest.mark.parametrize("name", sorted(RULE))
def test_only_one_unshuffled_in_memory_batch_is_routed(tf, name):
    arguments, expected = RULE[name]
    assert patch.single_batch(arguments(tf), tf, np) == expected
