"""v1_graph_seed (TF issue 35739) on real TensorFlow: a seed set before
``disable_eager_execution()`` makes graph-mode draws reproducible. Graph mode is process-wide, so
every switch happens in a fresh process."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

import tf_patches
from tf_patches.core.context import tf_module
from tf_patches.core.environment import detect
from tf_patches.patches import v1_graph_seed as patch

from .fresh import run_fresh

NAME = patch.PATCH.name
inside_gate = pytest.mark.skipif(not patch.PATCH.gate.check(detect())[0],
                                 reason=f"installed TensorFlow is outside {patch.PATCH.gate.describe()}")

DRAWS = """
    import json
    import tf_patches
    if {patched}:
        tf_patches.apply_all(only=["v1_graph_seed"])
    import tensorflow as tf
    {set_seed}(1234)
    tf.compat.v1.disable_eager_execution()
    def draws():
        ops = [tf.random.uniform([3]), tf.random.normal([2]), tf.nn.dropout(tf.ones([8]), rate=0.5),
               tf.random.shuffle(tf.range(6))]
        with tf.compat.v1.Session() as session:
            return [t.tolist() for t in session.run(ops)]
    default_graph = draws()
    with tf.Graph().as_default():  # the published workaround: seed again after the switch
        tf.random.set_seed(1234)
        workaround = draws()
    print(json.dumps({{"draws": default_graph, "workaround": workaround,
                      "status": tf_patches.report().status("v1_graph_seed")}}))
"""


@inside_gate
def test_graph_mode_draws_repeat_across_processes_as_the_workaround_does():
    runs = [(False, "tf.random.set_seed"), (False, "tf.random.set_seed"),
            (True, "tf.random.set_seed"), (True, "tf.compat.v1.set_random_seed")]  # both set eager seeds
    codes = [DRAWS.format(patched=patched, set_seed=set_seed) for patched, set_seed in runs]
    with ThreadPoolExecutor(2) as pool:
        stock, stock_again, patched, patched_compat = pool.map(run_fresh, codes)
    assert stock["draws"] != stock_again["draws"], "stock TF should lose the seed"
    assert patched["status"] == "applied"
    assert patched["draws"] == patched_compat["draws"]
    assert patched["draws"] == patched["workaround"] == stock["workaround"]


@inside_gate
def test_every_public_binding_is_wrapped_and_revert_restores_them(tf):
    ops = tf_module("python.framework.ops")
    v2_compat = tf_module("python.compat.v2_compat")  # disable_v2_behavior calls ops.disable_...
    original = ops.disable_eager_execution
    assert tf.compat.v1.disable_eager_execution is original
    tf_patches.apply_all(only=[NAME])
    for binding in (ops.disable_eager_execution, tf.compat.v1.disable_eager_execution):
        assert binding.__wrapped__ is original
    assert v2_compat.ops is ops
    tf_patches.revert_all()
    assert ops.disable_eager_execution is tf.compat.v1.disable_eager_execution is original


def test_skipped_with_its_reason_outside_the_gate():
    report = tf_patches.apply_all(env={"distribution": "tensorflow", "version": "1.15.5"})
    assert report.status(NAME) == "skipped"
    assert report[NAME].reason == "TensorFlow 1.15.5 is outside >=2.0"
