"""from_generator_release (TF issue 57690) on real TensorFlow: a from_generator dataset frees its
generator and what it captures once the dataset, and whatever still runs it, is gone; the elements
and the errors are the same."""

from __future__ import annotations

import gc
import re
import threading
import weakref
from typing import Any, Callable, Iterator, List, Tuple

import numpy as np
import pytest

import tf_patches
from tf_patches.core.environment import detect
from tf_patches.patches import from_generator_release as patch

NAME = patch.PATCH.name
inside_gate = pytest.mark.skipif(not patch.PATCH.gate.check(detect())[0],
                                 reason=f"installed TensorFlow is outside {patch.PATCH.gate.describe()}")
pytestmark = inside_gate


class Payload:
    """Stands for what a real generator captures: file handles, arrays, a whole data set."""


class Source:
    """A generator callable holding a payload: with the closure around it, three objects."""

    def __init__(self, n: int = 5):
        self.payload = Payload()
        self.n = n

    def __call__(self) -> Iterator[Tuple[int, float]]:
        for i in range(self.n):
            yield i, float(i) / 2


def dataset_and_refs(tf: Any, kind: str, n: int = 5) -> Tuple[Any, List[weakref.ref]]:
    """A from_generator dataset of ``Source(n)`` and weak references to the three objects it holds.

    ``kind`` picks how TF wraps the generator: ``numpy_function`` (a structure of TensorSpecs),
    ``eager_py_func`` (otherwise: here, one component of unknown rank), or TF1's ``compat.v1``."""
    source = Source(n)
    if kind == "eager_py_func":
        generator = lambda: (x for _, x in source())  # noqa: E731 - the closure, third object
        dataset = tf.data.Dataset.from_generator(generator, output_signature=tf.TensorSpec(None, tf.float32))
    else:
        generator = lambda: source()  # noqa: E731
        from_generator = (tf.data if kind == "numpy_function" else tf.compat.v1.data).Dataset.from_generator
        dataset = from_generator(generator, (tf.int64, tf.float32), ([], []))
    return dataset, [weakref.ref(source), weakref.ref(source.payload), weakref.ref(generator)]


def collect() -> None:
    for _ in range(3):  # Keras 3 and tf.data release some cycles only on a later pass
        gc.collect()


def freed(refs: List[weakref.ref]) -> int:
    collect()
    return sum(ref() is None for ref in refs)


@pytest.mark.parametrize("kind", ["numpy_function", "eager_py_func", "compat.v1"])
def test_deleted_dataset_frees_generator_and_captures(tf, kind):
    def run() -> int:
        dataset, refs = dataset_and_refs(tf, kind)
        assert len(list(dataset)) == 5
        del dataset
        return freed(refs)

    assert run() == 0, "stock TF keeps the generator for good (issue 57690): the probe must see it"
    assert tf_patches.apply_all(only=[NAME]).status(NAME) == "applied"
    assert run() == 3


@pytest.fixture
def patched(tf):
    assert tf_patches.apply_all(only=[NAME]).status(NAME) == "applied"
    return tf


def test_iterator_outliving_the_dataset_keeps_the_generator_until_it_ends(patched):
    tf = patched
    dataset, refs = dataset_and_refs(tf, "numpy_function", n=6)
    iterator = iter(dataset.map(lambda i, x: (i * 10, x)).batch(2).prefetch(1))
    first = next(iterator)
    del dataset
    assert freed(refs) == 0
    rest = [element[0].numpy().tolist() for element in iterator]
    assert [first[0].numpy().tolist()] + rest == [[0, 10], [20, 30], [40, 50]]
    del iterator, first
    assert freed(refs) == 3


def test_tf_function_capturing_the_dataset_keeps_working_after_del(patched):
    tf = patched
    dataset, refs = dataset_and_refs(tf, "numpy_function")

    @tf.function
    def total():
        result = tf.constant(0, tf.int64)
        for i, _ in dataset:
            result += i
        return result

    assert int(total()) == 10
    del dataset
    assert freed(refs) == 0
    assert int(total()) == 10  # the function's capture holds the dataset's variant tensor


def test_model_fit_trains_identically_and_then_frees_the_generator(tf):
    def fit() -> Tuple[List[float], List[weakref.ref]]:
        x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(16, 2)
        y = x.sum(axis=1, keepdims=True)
        source = lambda: zip(x, y)  # noqa: E731
        refs = [weakref.ref(source)]
        signature = (tf.TensorSpec([2], tf.float32), tf.TensorSpec([1], tf.float32))
        dataset = tf.data.Dataset.from_generator(source, output_signature=signature).batch(4)
        tf.keras.utils.set_random_seed(1)
        model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
        return model.fit(dataset, epochs=3, verbose=0).history["loss"], refs

    stock, stock_refs = fit()
    tf_patches.apply_all(only=[NAME])
    patched_losses, refs = fit()
    assert patched_losses == stock and len(stock) == 3
    assert freed(stock_refs) == 0
    assert freed(refs) == 1


# -- the same elements and errors -----------------------------------------------------------------
def ragged_source():
    yield 1, [[1, 2], [3]]
    yield 2, [[4], [5, 6, 7]]


def dict_source():
    for i in range(3):
        yield {"id": i, "text": f"row {i}".encode(), "pixels": np.full([2, 2], i, np.uint8)}


def failing_source():
    yield 1
    raise ValueError("the source broke")


def wrong_dtype_source():
    yield "not a number"


DATASETS: dict = {
    "ragged signature": lambda tf: tf.data.Dataset.from_generator(ragged_source, output_signature=(
        tf.TensorSpec([], tf.int32), tf.RaggedTensorSpec([2, None], tf.int32))),
    "dict types and shapes": lambda tf: tf.data.Dataset.from_generator(
        dict_source, output_types={"id": tf.int64, "text": tf.string, "pixels": tf.uint8},
        output_shapes={"id": [], "text": [], "pixels": [2, 2]}),
    "args": lambda tf: tf.data.Dataset.from_generator(
        lambda n, step: range(0, n, step), output_types=tf.int64, args=(7, 2)),
    "map, repeat, batch": lambda tf: tf.data.Dataset.from_generator(
        Source(), output_types=(tf.int64, tf.float32)).map(lambda i, x: i + tf.cast(x, tf.int64))
    .repeat(2).batch(3),
    "interleave": lambda tf: tf.data.Dataset.range(2).interleave(
        lambda _: tf.data.Dataset.from_generator(Source(3), output_types=(tf.int64, tf.float32)),
        cycle_length=2),
    "error in the generator": lambda tf: tf.data.Dataset.from_generator(
        failing_source, output_signature=tf.TensorSpec([], tf.int32)),
    "wrong dtype": lambda tf: tf.data.Dataset.from_generator(wrong_dtype_source, output_types=tf.int32),
}


def outcome(tf: Any, make: Callable[[Any], Any]) -> Any:
    """The elements (dtype, shape, value of every component), or the error, with TF's per-call
    callback tokens (pyfunc_<n>) masked: they differ between any two runs."""
    elements = []
    try:
        for element in make(tf):
            flat = tf.nest.flatten(element, expand_composites=True)
            elements.append([(t.dtype.name, tuple(t.shape), np.asarray(t).tolist()) for t in flat])
    except Exception as exc:  # the error is part of the behaviour compared
        return elements, type(exc).__name__, re.sub(r"pyfunc_\d+", "pyfunc_N", str(exc))
    return elements


def test_elements_and_errors_are_the_same_with_the_patch(tf):
    stock = {name: outcome(tf, make) for name, make in DATASETS.items()}
    assert tf_patches.apply_all(only=[NAME]).status(NAME) == "applied"
    assert {name: outcome(tf, make) for name, make in DATASETS.items()} == stock
    assert stock["error in the generator"][1] == "InvalidArgumentError"  # the comparison has errors


def test_graph_mode_datasets_are_left_to_their_graph(patched):
    tf = patched
    with tf.Graph().as_default() as graph:
        dataset, _ = dataset_and_refs(tf, "numpy_function")
        element = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
        with tf.compat.v1.Session() as session:
            assert session.run(element) == (0, 0.0)
    # As in stock TF: the graph owns the three callbacks and frees them when it goes.
    assert len(graph._py_funcs_used_in_graph) == 3


def test_datasets_made_on_many_threads_each_keep_their_own_callbacks(patched):
    tf = patched
    results, errors = [], []
    barrier = threading.Barrier(4)

    def make_and_read(n: int) -> None:
        try:
            barrier.wait()
            dataset = tf.data.Dataset.from_generator(Source(n), output_types=(tf.int64, tf.float32))
            results.append((n, [int(i) for i, _ in dataset]))
        except Exception as exc:  # reported below: a thread's exception would be lost
            errors.append(exc)

    threads = [threading.Thread(target=make_and_read, args=(n,)) for n in (2, 3, 4, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert sorted(results) == [(n, list(range(n))) for n in (2, 3, 4, 5)]


# -- gate -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", ["2.11.1", "1.15.5"])
def test_older_versions_are_skipped_with_the_reason(tf, version):
    row = tf_patches.apply_all(only=[NAME], env={"distribution": "tensorflow", "version": version})[NAME]
    assert row.status == "skipped"
    assert "outside >=2.12" in row.reason
    dataset, refs = dataset_and_refs(tf, "eager_py_func")
    list(dataset)
    del dataset
    assert freed(refs) == 0  # nothing installed: stock TF keeps them
