"""eager_py_function (TF issues 35010, 51839) on real TensorFlow: eager tf.py_function no longer
grows per call, and every result, error and gradient is the same as stock TF's."""

from __future__ import annotations

import gc
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict

import numpy as np
import pytest
from packaging.version import Version

import tf_patches
from tf_patches.core.context import tf_module
from tf_patches.core.environment import detect
from tf_patches.core.gate import parse_version
from tf_patches.patches import eager_py_function as patch

from .fresh import unpatched_and_patched

NAME = patch.PATCH.name
inside_gate = pytest.mark.skipif(not patch.PATCH.gate.check(detect())[0],
                                 reason=f"installed TensorFlow is outside {patch.PATCH.gate.describe()}")
pytestmark = inside_gate

CALLS = 1500  # ≈40 KiB per call unpatched on 2.12 and 2.21: ≈58 MiB, far above the 20 MiB bound
BODY = """
    x = tf.constant([1.0, 2.0, 3.0])
    def body(a):
        return a * 2, tf.shape(a)
"""


def test_eager_py_function_loop_no_longer_grows():
    unpatched, patched = unpatched_and_patched(  # warm-up: allocator pools, first kernels
        NAME, "tf.py_function(body, [x], [tf.float32, tf.int32])", setup=BODY, calls=CALLS, warmup=200,
        extra="[t.numpy().tolist() for t in tf.py_function(body, [x], [tf.float32, tf.int32])]")
    assert unpatched.growth_mib > 20, f"the unpatched loop should grow: {unpatched}"
    assert patched.status == "applied" and patched.extra == [[2.0, 4.0, 6.0], [3]]
    assert patched.growth_mib < 5, f"patched loop grew: {patched} (unpatched {unpatched})"


def named(a: Any) -> Any:
    return a * 2


def test_finished_calls_leave_no_callbacks_behind(tf):
    """The kernel is half the leak; the other half is the callbacks (TF's global graph keeps each,
    and a named function chains them through its ``ag_dnc_wrapper__`` attribute)."""
    script_ops = tf_module("python.ops.script_ops")
    x = tf.constant([1.0])

    def callbacks_alive() -> int:
        gc.collect()
        return sum(isinstance(o, script_ops.EagerFunc) for o in gc.get_objects())

    def growth() -> int:
        before = callbacks_alive()
        for _ in range(50):
            tf.py_function(named, [x], tf.float32)
            tf.py_function(lambda a: a, [x], tf.float32)
        return callbacks_alive() - before

    assert growth() >= 100, "stock TF keeps every callback: the probe must see them"
    tf_patches.apply_all(only=[NAME])
    assert growth() == 0


# -- the same results, errors and gradients -------------------------------------------------------
class Failure(Exception):
    """An exception type TF knows nothing of."""


def nested(tf: Any, x: Any) -> Any:
    return tf.py_function(lambda a: tf.py_function(lambda b: b + 1, [a], tf.float32) * 3, [x],
                          tf.float32)


def composites(tf: Any, x: Any) -> Any:
    ragged = tf.ragged.constant([[1, 2], [3]])
    spec = tf.RaggedTensorSpec([2, None], tf.int32)
    return tf.py_function(lambda r, a: (r * 2, a), [ragged, x], [spec, tf.float32])


def raise_tf_error(tf: Any) -> Callable[[Any], Any]:
    def body(a: Any) -> Any:
        raise tf.errors.NotFoundError(None, None, "no such thing")

    return body


def in_function(tf: Any, x: Any) -> Any:
    return tf.function(lambda a: tf.py_function(lambda b: b * b, [a], tf.float32))(x)


def in_dataset(tf: Any, x: Any) -> Any:
    dataset = tf.data.Dataset.from_tensor_slices(x).map(
        lambda a: tf.py_function(lambda b: b - 1, [a], tf.float32))
    return list(dataset)


def with_variable(tf: Any, x: Any) -> Any:
    variable = tf.Variable([5.0, 6.0, 7.0])
    return tf.py_function(lambda v, a: v + a, [variable, x], tf.float32)


CASES: Dict[str, Callable[[Any, Any], Any]] = {
    "one dtype, not a list": lambda tf, x: tf.py_function(lambda a: a * 2, [x], tf.float32),
    "list of dtypes": lambda tf, x: tf.py_function(
        lambda a: (a, tf.cast(a, tf.int64), tf.strings.as_string(a)), [x],
        [tf.float32, tf.int64, tf.string]),
    "one-element list": lambda tf, x: tf.py_function(lambda a: [a], [x], [tf.float32]),
    "no outputs": lambda tf, x: tf.py_function(lambda a: None, [x], []),
    "python and numpy values": lambda tf, x: tf.py_function(
        lambda a: (3, np.arange(4, dtype=np.int16), [[1.5]]), [x], [tf.float64, tf.int16, tf.float32]),
    "no inputs": lambda tf, x: tf.py_function(lambda: tf.eye(2), [], tf.float32),
    "a tensor as inp: one argument per row": lambda tf, x: tf.py_function(
        lambda a: a + 1, x, tf.float32),
    "named op": lambda tf, x: tf.py_function(lambda a: a, [x], tf.float32, name="mine"),
    "keyword arguments": lambda tf, x: tf.py_function(func=lambda a: -a, inp=[x], Tout=tf.float32),
    "decorator (TF >= 2.13; a TypeError before)": lambda tf, x: tf.py_function(Tout=tf.float32)(
        lambda a: a / 2)(x),
    "nested": nested,
    "composite tensors": composites,
    "variable input": with_variable,
    "inside tf.function": in_function,
    "inside a tf.data map": in_dataset,
    "raises ValueError": lambda tf, x: tf.py_function(
        lambda a: (_ for _ in ()).throw(ValueError("bad value")), [x], tf.float32),
    "raises an unknown exception": lambda tf, x: tf.py_function(
        lambda a: (_ for _ in ()).throw(Failure("custom")), [x], tf.float32),
    "raises a TF error": lambda tf, x: tf.py_function(raise_tf_error(tf), [x], tf.float32),
    "returns the wrong dtype": lambda tf, x: tf.py_function(lambda a: tf.constant([1]), [x],
                                                            tf.float32),
    "returns too few values": lambda tf, x: tf.py_function(lambda a: None, [x], tf.float32),
    "returns a variable": lambda tf, x: tf.py_function(lambda a: tf.Variable(a), [x], tf.float32),
    "func not callable": lambda tf, x: tf.py_function(42, [x], tf.float32),
    "Tout missing": lambda tf, x: tf.py_function(lambda a: a, [x]),
}


def described(tf: Any, value: Any) -> Any:
    """dtype, shape and value of every tensor in ``value``, or of the error it raised; callback
    tokens (pyfunc_<n>) are masked, as they differ between any two calls of stock TF too."""
    if isinstance(value, BaseException):
        return type(value).__name__, re.sub(r"pyfunc_\d+", "pyfunc_N", str(value))
    flat = tf.nest.flatten(value, expand_composites=True)
    return [(t.dtype.name, tuple(t.shape), np.asarray(t).tolist()) for t in flat], type(value).__name__


def outcomes(tf: Any) -> Dict[str, Any]:
    x = tf.constant([1.0, 2.0, 3.0])
    results = {}
    for name, case in CASES.items():
        try:
            results[name] = described(tf, case(tf, x))
        except Exception as exc:  # the error is part of the behaviour compared
            results[name] = described(tf, exc)
    return results


def callbacks_held(tf: Any) -> int:
    graph = tf_module("python.framework.ops").get_default_graph()
    return len(getattr(graph, "_py_funcs_used_in_graph", []))


def test_results_dtypes_shapes_and_errors_are_the_same(tf):
    before = callbacks_held(tf)
    stock = outcomes(tf)
    stock_growth = callbacks_held(tf) - before
    assert tf_patches.apply_all(only=[NAME]).status(NAME) == "applied"
    before = callbacks_held(tf)
    assert outcomes(tf) == stock
    # The comparison covers the patched path: stock TF kept a callback per eager call; patched,
    # only the traced ones (tf.function, tf.data) stay with their graph, as in stock TF: the global
    # graph before TF 2.22, their own FuncGraph from then on (pull request 123530).
    assert stock_growth >= 20
    assert callbacks_held(tf) - before == (2 if parse_version(tf.__version__) < Version("2.22") else 0)
    assert stock["raises ValueError"][0] == "InvalidArgumentError"


def gradients(tf: Any) -> Any:
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape() as tape:  # two calls in flight on one tape: two tokens needed
        tape.watch(x)
        both = tf.py_function(lambda a: a * a, [x], tf.float32) + tf.py_function(
            lambda a: tf.sin(a), [x * 2], tf.float32)
        with tape.stop_recording():
            unrecorded = tf.py_function(lambda a: a * a, [x], tf.float32)
    results = [tape.gradient([both, unrecorded], x)]
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            cube = tf.py_function(lambda a: a * a * a, [x], tf.float32)
        results.append(inner.gradient(cube, x))
    results.append(outer.gradient(results[-1], x))  # second order: None, TF has none
    return [None if r is None else described(tf, r) for r in results]


def test_gradients_under_tapes_are_the_same(tf):
    stock = gradients(tf)
    tf_patches.apply_all(only=[NAME])
    assert gradients(tf) == stock
    assert stock[0][0][0][2] == pytest.approx([2 + 2 * np.cos(2), 4 + 2 * np.cos(4), 6 + 2 * np.cos(6)])


def test_concurrent_calls_each_get_their_own_results(tf):
    tf_patches.apply_all(only=[NAME])
    registry = tf_module("python.ops.script_ops")._py_funcs
    registered = registry.size()
    barrier = threading.Barrier(4)

    def calls(k: int) -> list:
        barrier.wait()
        x = tf.constant([float(k)])
        return [float(tf.py_function(lambda a: a * i, [x], tf.float32)[0]) for i in range(50)]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(calls, range(4)))
    assert results == [[float(k * i) for i in range(50)] for k in range(4)]
    assert registry.size() == registered  # every pooled token released


def test_async_eager_calls_take_tfs_own_path(tf):
    tf_patches.apply_all(only=[NAME])
    context = tf_module("python.eager.context")
    executor = tf_module("python.eager.executor").new_executor(enable_async=True)
    before = callbacks_held(tf)
    with context.executor_scope(executor):
        assert context.is_async()
        result = tf.py_function(lambda a: a + 1, [tf.constant(1.0)], tf.float32)
        executor.wait()
    assert float(result) == 2.0
    assert callbacks_held(tf) == before + 1  # kept, as by stock TF: the op may run later


def test_public_bindings_are_patched_and_reverted(tf):
    script_ops = tf_module("python.ops.script_ops")
    stock = tf.py_function
    tf_patches.apply_all(only=[NAME])
    for binding in (tf.py_function, tf.compat.v1.py_function, tf.compat.v2.py_function,
                    script_ops.eager_py_func):
        assert binding.__tf_patches__ == NAME
    assert tf.py_function.__doc__ == stock.__doc__
    tf_patches.revert_all()
    assert tf.py_function is stock and script_ops.eager_py_func is stock
    assert "_next_unique_token" not in vars(script_ops._py_funcs)


# -- gate -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", ["2.11.1", "1.15.5"])
def test_older_versions_are_skipped_with_the_reason(tf, version):
    stock = tf.py_function
    row = tf_patches.apply_all(only=[NAME], env={"distribution": "tensorflow", "version": version})[NAME]
    assert row.status == "skipped"
    assert "outside >=2.12" in row.reason
    assert tf.py_function is stock
