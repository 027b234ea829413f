"""graph_growth_guard on real TensorFlow, in this process: a Session.run loop that builds ops
warns once (or raises in finalize mode), a clean loop never does."""

from __future__ import annotations

import warnings

import pytest

import tf_patches
from tf_patches.core.context import tf_module
from tf_patches.patches.graph_growth_guard import (
    GROWING_RUNS,
    NAME,
    WARMUP_RUNS,
    GraphGrowthWarning,
)


@pytest.fixture
def graph(tf):
    """A graph of its own with a placeholder ``x`` and ``y = 2x``, and a Session on it."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [], name="x")
        y = x * 2.0
        with tf.compat.v1.Session(graph=graph) as sess:
            yield graph, sess, x, y


def apply(**options):
    report = tf_patches.apply_all(only=[NAME], **options)
    assert report.status(NAME) == "applied", report[NAME]


def test_loop_adding_ops_warns_once_with_counts_names_and_the_line(tf, graph):
    _, sess, x, y = graph
    apply()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(WARMUP_RUNS + 3 * GROWING_RUNS):
            z = tf.square(y) + y  # the leak: 2 new ops (Square, AddV2) per run
            sess.run(z, feed_dict={x: 1.0})
    growth = [w for w in caught if issubclass(w.category, GraphGrowthWarning)]
    assert len(growth) == 1, [str(w.message) for w in caught]
    message = str(growth[0].message)
    assert f"grew before {GROWING_RUNS} of the {GROWING_RUNS} runs after the first {WARMUP_RUNS}" in message
    assert f"by {2 * GROWING_RUNS} ops (2 per growing run)" in message
    assert "(Square)" in message and "(AddV2)" in message
    assert "sess.graph.finalize()" in message
    # The warning points at the line that built the ops, and names it.
    assert growth[0].filename == __file__
    assert f"{__file__}:{growth[0].lineno} in test_loop_adding_ops_warns_once" in message
    assert "z = tf.square(y) + y" in open(__file__).read().splitlines()[growth[0].lineno - 1]


def test_growth_once_per_epoch_warns_too(tf, graph):
    _, sess, x, y = graph
    apply()
    with pytest.warns(GraphGrowthWarning, match=f"grew before {GROWING_RUNS} of the"):
        for _epoch in range(GROWING_RUNS + 1):
            mean = tf.reduce_mean(y)  # one op per epoch, between runs of fixed ops
            for _ in range(WARMUP_RUNS):
                sess.run(y, feed_dict={x: 1.0})
            sess.run(mean, feed_dict={x: 1.0})


def test_clean_loop_never_warns(tf, graph, tmp_path):
    graph_, sess, x, y = graph
    apply()
    # Set-up during the warm-up: a variable, its update op, an initialiser, a saver.
    w = tf.compat.v1.Variable(0.0, name="w")
    step = tf.compat.v1.assign_add(w, x)
    sess.run(tf.compat.v1.global_variables_initializer())
    saver = tf.compat.v1.train.Saver()
    with warnings.catch_warnings():
        warnings.simplefilter("error", GraphGrowthWarning)
        for i in range(200):
            _, value = sess.run([step, y], feed_dict={x: float(i)})
            sess.run({"w": w, "y": y}, feed_dict={x: 1.0})
            assert y.eval(session=sess, feed_dict={x: 3.0}) == 6.0
            step.op.run(session=sess, feed_dict={x: 0.0})  # Operation.run, through Session.run
            if i == 100:
                evaluation = tf.reduce_sum(y)  # built once, later: one growth is no loop
                saver.save(sess, str(tmp_path / "ckpt"))
            if i > 100:
                sess.run(evaluation, feed_dict={x: 1.0})
    assert value == 2.0 * 199
    assert sess.run(w) == sum(range(200))


def test_finalize_mode_makes_the_adding_line_raise_tfs_error(tf, graph):
    graph_, sess, x, y = graph
    apply(graph_growth_guard="finalize")
    for _ in range(WARMUP_RUNS - 1):
        sess.run(tf.square(y), feed_dict={x: 1.0})  # ops built during the warm-up are fine
    sess.run(y, feed_dict={x: 1.0})
    assert graph_.finalized
    with pytest.raises(RuntimeError, match=r"Graph is finalized and cannot be modified\. \(tf-patches"):
        tf.square(y)
    assert sess.run(y, feed_dict={x: 2.0}) == 4.0  # existing ops still run
    tf_patches.revert_all()
    assert not graph_.finalized  # reverting the patch unfinalizes what it finalized
    tf.square(y)


def test_environment_variable_chooses_the_mode(tf, graph, monkeypatch):
    graph_, sess, x, y = graph
    monkeypatch.setenv("TF_PATCHES_GRAPH_GROWTH", "finalize")
    apply()
    for _ in range(WARMUP_RUNS):
        sess.run(y, feed_dict={x: 1.0})
    assert graph_.finalized
    tf_patches.revert_all()
    monkeypatch.setenv("TF_PATCHES_GRAPH_GROWTH", "off")
    assert tf_patches.apply_all(only=[NAME]).status(NAME) == "skipped"


def test_revert_restores_session_run(tf):
    session = tf_module("python.client.session")
    original = session.BaseSession.run
    apply()
    assert session.BaseSession.run is not original
    assert tf.compat.v1.Session.run is session.BaseSession.run
    tf_patches.revert_all()
    assert session.BaseSession.run is original
    assert "run" not in vars(tf.compat.v1.Session)
