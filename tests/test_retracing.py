"""retracing: a diagnose signature without a patch. apply_all lists it skipped and warns nothing; a
diagnosis counts the retraces of a live tf.function at the user's call line (Python values, new
shapes), and nothing for tensors, a relaxed signature, functions made anew per call, or Keras's
own step functions."""

from __future__ import annotations

import warnings
from typing import Any, Callable, Optional, Tuple

import tf_patches
from tf_patches.core.signature import DIAGNOSING
from tf_patches.patches import retracing as patch

NAME = patch.PATCH.name


def test_apply_all_skips_it_and_warns_nothing(tf):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        row = tf_patches.apply_all(only=[NAME])[NAME]
    assert row.status == "skipped" and row.reason.startswith("nothing to patch"), row
    assert patch.precondition(tf_patches.detect(), {DIAGNOSING: True}) is None


def diagnosed(program: Callable[[], Any]) -> Tuple[Optional[int], Any, Any]:
    """The probe's count, the leak row (None: not named) and the report, for ``program``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TF's own retracing warning
        with tf_patches.diagnose() as diagnosis:
            program()
    snapshot = diagnosis.snapshot()
    assert NAME not in snapshot.skipped, snapshot.skipped
    report = diagnosis.report()
    found = [leak for leak in report.leaks if leak.patch == NAME]
    count = snapshot.counts()[NAME]
    assert not any(condition["patch"] == NAME for condition in snapshot.conditions)
    return count, (found[0] if found else None), report


def test_python_values_and_new_shapes_are_counted_at_the_calling_line(tf):
    @tf.function
    def step(x, i):
        return x * i

    @tf.function
    def shapes(x):
        return tf.reduce_sum(x)

    x = tf.constant(1.0)

    def program():
        for i in range(30):
            step(x, i)  # PYTHON INT LINE
        for n in range(1, 16):
            shapes(tf.zeros([n]))

    count, leak, report = diagnosed(program)
    assert count == 29 + 14, count
    line = next(number for number, text in enumerate(open(__file__), 1) if "# PYTHON INT LINE" in text)
    # The first events are placed exactly, the later ones shared out like them (core.signature.Sites).
    assert leak is not None and leak.sites[0][:2] == [__file__, line] and leak.count == 43, leak
    assert leak.fix_command is None and "input_signature" in leak.code_fix and "reduce_retracing" in leak.code_fix
    assert "retracing" in str(report)


def test_tensors_relaxed_shapes_new_functions_and_keras_are_not_retraces(tf):
    import keras
    import numpy as np

    @tf.function
    def step(x, i):
        return x * tf.cast(i, tf.float32)

    @tf.function(reduce_retracing=True)
    def relaxed(x):
        return tf.reduce_sum(x)

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(loss="mse")
    data = np.ones((8, 4), np.float32), np.ones((8, 2), np.float32)

    def program():
        x = tf.constant(1.0)
        for i in range(30):
            step(x, tf.constant(i))
            tf.function(lambda v: v * 2)(x)  # a new function each time, traced once
        for n in range(1, 16):
            relaxed(tf.zeros([n]))  # two traces: the first shape, then [None]
        for _ in range(3):
            model.fit(*data, verbose=0)
            model.predict(data[0], verbose=0)
            model.train_on_batch(*data)

    count, leak, _ = diagnosed(program)
    assert count <= 2 and leak is None, (count, leak)
