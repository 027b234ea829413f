"""custom_gradient_registry (TF issues 97697, 62854, 61791) on real TensorFlow: graph-mode
custom-gradient registrations no longer keep their graphs alive, and every gradient is the same."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import tf_patches
from tf_patches.core.context import tf_module
from tf_patches.core.environment import detect
from tf_patches.patches import custom_gradient_registry as patch

from .fresh import unpatched_and_patched

NAME = patch.PATCH.name
inside_gate = pytest.mark.skipif(not patch.PATCH.gate.check(detect())[0],
                                 reason=f"installed TensorFlow is outside {patch.PATCH.gate.describe()}")

MODELS = 12  # ≈1.2 s each; 2.21 unpatched: 2 registrations and 3.8 MB per model, patched: 0 and 0.1 MB
MB_PER_MODEL = 1.0
FIT_LOOP = """
    import gc
    from tensorflow.python.framework import ops
    def entries():
        return sum(k.startswith("CustomGradient-") for k in list(ops._gradient_registry._registry))
    x = tf.random.stateless_uniform([64, 8], seed=[1, 2])
    y = tf.random.stateless_uniform([64, 1], seed=[3, 4])
    def build_and_fit():
        model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"),
                                     tf.keras.layers.Dense(1)])
        model.compile("adam", "mse")
        model.fit(x, y, epochs=1, batch_size=32, verbose=0)
        tf.keras.backend.clear_session()
    build_and_fit()  # warm-up: allocator pools, Keras' first-use caches
    gc.collect()  # its registrations freed (patched) before they are counted
    start_entries = entries()
"""


@inside_gate
def test_models_fit_in_a_loop_no_longer_leak():
    unpatched, patched = unpatched_and_patched(NAME, "build_and_fit()", setup=FIT_LOOP, calls=MODELS, warmup=0,
                                               extra=f"(entries() - start_entries) / {MODELS}")
    assert unpatched.extra >= 1, f"the unpatched loop should register: {unpatched}"
    assert unpatched.growth.growth / 1e6 / MODELS > MB_PER_MODEL, f"the unpatched loop should leak: {unpatched}"
    assert patched.status == "applied"
    assert patched.extra == 0, f"patched registry grew: {patched}"
    assert patched.growth.growth / 1e6 / MODELS < MB_PER_MODEL, f"patched loop grew: {patched} (unpatched {unpatched})"


def custom_gradient_entries():
    ops = tf_module("python.framework.ops")
    return sum(name.startswith("CustomGradient-") for name in list(ops._gradient_registry._registry))


def clipped(tf):
    """A custom gradient that differs from the true one, so using it shows in the result."""

    @tf.custom_gradient
    def clip_sin(x):
        def grad(dy):
            return tf.clip_by_value(dy, -0.5, 0.5) * tf.cos(x)

        return tf.sin(x), grad

    return clip_sin


def traced_graphs(tf, n):
    """Trace ``n`` new tf.functions using a custom gradient; return weak references to their graphs."""
    clip_sin = clipped(tf)

    def trace():
        return tf.function(lambda x: clip_sin(x) * 2.0).get_concrete_function(tf.TensorSpec([3])).graph

    graphs = [weakref.ref(trace()) for _ in range(n)]
    gc.collect()
    return graphs


@inside_gate
def test_registry_entries_and_graphs_are_freed_with_their_function(tf):
    before = custom_gradient_entries()
    stock = traced_graphs(tf, 5)
    assert custom_gradient_entries() - before == 5  # the leak: each trace registers for good
    assert all(ref() is not None for ref in stock)
    tf_patches.apply_all(only=[NAME])
    before = custom_gradient_entries()
    patched = traced_graphs(tf, 5)
    assert custom_gradient_entries() == before
    assert all(ref() is None for ref in patched)


X = np.linspace(-2.0, 2.0, 6, dtype=np.float32).reshape(2, 3)


def gradient_after_gc(tf, f, *variables):
    """Trace ``f`` and collect garbage first, then differentiate a call: the gradient is built
    from graphs that only the traced function keeps alive."""
    x = tf.constant(X)
    f(x)
    gc.collect()
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    return tape.gradient(y, [x, *variables])


def tape_inside_function(tf):
    clip_sin = clipped(tf)

    @tf.function
    def grad(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(clip_sin(x) * x)
        return tape.gradient(y, x)

    return [grad(tf.constant(X))]


def outer_tape_over_traced_call(tf):
    clip_sin = clipped(tf)
    f = tf.function(lambda x: tf.reduce_sum(clip_sin(x) ** 2))
    x = tf.constant(X)
    f(x)  # trace first: the gradient is built later, from the graph kept alive by f
    gc.collect()
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = f(x)
        dx = inner.gradient(y, x)
    return [dx, outer.gradient(dx, x)]


def with_variables(tf):
    v = tf.Variable(1.5)

    @tf.custom_gradient
    def scaled(x):
        def grad(dy, variables):
            return dy * v * 3.0, [tf.reduce_sum(dy * x)]

        return x * v, grad

    return gradient_after_gc(tf, tf.function(lambda x: tf.reduce_sum(scaled(x) ** 2)), v)


def recompute_grad(tf):
    w = tf.Variable(tf.reshape(tf.range(9, dtype=tf.float32) / 9.0, [3, 3]))
    block = tf.recompute_grad(lambda x: tf.tanh(tf.matmul(x, w)))

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(block(block(x)) ** 2)
        return tape.gradient(y, [x, w])

    return step(tf.constant(X))


def cond_and_while_loop(tf):
    clip_sin = clipped(tf)

    @tf.function
    def f(x):
        # clip_sin(x * 1.0), not clip_sin(x): stock TF (2.21) trips an assertion in cond_v2 when
        # a branch applies the custom gradient to the captured tensor itself under an outer tape.
        y = tf.cond(tf.reduce_sum(x) > -100.0, lambda: clip_sin(x * 1.0), lambda: clip_sin(2.0 * x))
        _, z = tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, clip_sin(v) + y), (0, y))
        return tf.reduce_sum(z ** 2)

    return gradient_after_gc(tf, f)


def v1_graph_and_session(tf):
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant(X)
        y = tf.reduce_sum(clipped(tf)(x) ** 2)
        dx = tf.gradients(y, x)
        with tf.compat.v1.Session() as session:
            return session.run(dx)


def keras_fit(tf):
    tf.keras.utils.set_random_seed(3)
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(tf.keras.optimizers.Adam(0.01), "mse")
    x = np.tile(X, (8, 1))
    history = model.fit(x, x[:, :1] * 2.0, epochs=3, batch_size=4, shuffle=False, verbose=0)
    return [np.array(history.history["loss"])] + model.get_weights()


SCENARIOS = {f.__name__: f for f in (tape_inside_function, outer_tape_over_traced_call, with_variables,
                                     recompute_grad, cond_and_while_loop, v1_graph_and_session,
                                     keras_fit)}


@inside_gate
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_gradients_are_bit_identical_and_the_patched_registrations_freed(tf, scenario):
    def run():
        before = custom_gradient_entries()
        values = [np.asarray(t).tobytes() for t in SCENARIOS[scenario](tf)]
        gc.collect()
        return values, custom_gradient_entries() - before

    stock, stock_growth = run()
    tf_patches.apply_all(only=[NAME])
    patched, patched_growth = run()
    assert patched == stock
    assert stock_growth > 0 and patched_growth == 0  # the patched path was taken, and cleaned up


@inside_gate
def test_revert_restores_stock_registrations(tf):
    custom_gradient = tf_module("python.ops.custom_gradient")
    ops = tf_module("python.framework.ops")
    original = custom_gradient._graph_mode_decorator
    tf_patches.apply_all(only=[NAME])
    assert custom_gradient._graph_mode_decorator.__wrapped__ is original
    f = tf.function(lambda x: clipped(tf)(x))
    f(tf.constant(X))
    weak = [n for n, e in ops._gradient_registry._registry.items() if isinstance(e, patch.WeakEntry)]
    assert weak
    tf_patches.revert_all()
    assert custom_gradient._graph_mode_decorator is original
    del f
    gc.collect()
    entries = ops._gradient_registry._registry
    assert all(type(entries[name]) is dict for name in weak)  # held for good again, as stock TF does


def test_skipped_with_its_reason_outside_the_gate():
    report = tf_patches.apply_all(env={"distribution": "tensorflow", "version": "2.13.1"})
    assert report.status(NAME) == "skipped"
    assert report[NAME].reason == "TensorFlow 2.13.1 is outside >=2.14"
