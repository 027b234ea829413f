"""run_isolated and fresh_graph on real TensorFlow: model-per-fold memory stays in the child,
the child's result, exception, crash and time-out come back as they should, the parent's patches
reach the child, and fresh_graph clears the session state.

The functions the children run are defined at module level here: a spawned child imports this
module (not TensorFlow, which each job imports itself) to find them.
"""

from __future__ import annotations

import math
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import tf_patches
from tf_patches.core.gate import parse_version
from tf_patches.isolation.local import (
    IsolatedCrash,
    IsolatedTimeout,
    IsolationWarning,
    RemoteTraceback,
    fresh_graph,
    run_isolated,
)

from tf_patches.testing import rss_bytes

from .fresh import run_fresh

FOLDS = 5
IN_PROCESS_MODELS = 10  # ≈5 MiB each on TF 2.21 (+50 MiB measured for 10): far above 3 × the bound
PARENT_BOUND_MIB = 10.0  # measured: +0.02 MiB over 5 isolated folds


def rss_mib() -> float:
    return rss_bytes() / 2**20


def fit_tiny_model(seed: int) -> float:
    """One fold: a small Keras model built and fit in whatever process runs it."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    x = rng.random((64, 4), dtype=np.float32)
    y = x.sum(axis=1, keepdims=True)
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile("adam", "mse")
    model.fit(x, y, epochs=2, batch_size=16, verbose=0)
    return float(model.evaluate(x, y, verbose=0))


def rss_growth_of_folds_in_one_process(folds: int) -> float:
    """The loop run_isolated replaces: every fold in one process; its RSS growth in MiB."""
    fit_tiny_model(0)  # the first fold pays for imports and one-time set-up: not growth
    start = rss_mib()
    for seed in range(folds):
        fit_tiny_model(seed)
    return rss_mib() - start


def add(a: int, b: int = 0) -> int:
    return a + b


def fail_in_child() -> None:
    raise ValueError("bad fold")


def crash_with_sigsegv() -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def exit_without_result() -> None:
    os._exit(3)


def sleep_after_writing_pid(path: str) -> None:
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(120)


def finalize_mode_in_child() -> dict:
    """What the patch does in the child: status, and whether a growing loop meets the error."""
    import tensorflow as tf

    from tf_patches.patches.graph_growth_guard import WARMUP_RUNS

    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [])
        with tf.compat.v1.Session() as sess:
            try:
                for _ in range(WARMUP_RUNS + 1):
                    sess.run(tf.square(x), feed_dict={x: 1.0})
                error = None
            except RuntimeError as exc:
                error = str(exc)
    return {"status": tf_patches.report().status("graph_growth_guard"), "error": error}


def test_folds_through_run_isolated_keep_the_parent_rss_flat(tf):
    if parse_version(tf.__version__) < parse_version("2.14"):
        pytest.skip("a Keras model-per-fold loop grows in one process from TF 2.14 on (FINDINGS.md)")
    assert run_isolated(add, 1) == 1  # the parent's own one-time cost: spawn machinery, pickling
    with ThreadPoolExecutor(1) as pool:
        # The same folds in one process, in a child of its own, side by side with the folds below.
        in_process = pool.submit(run_isolated, rss_growth_of_folds_in_one_process, IN_PROCESS_MODELS)
        start = rss_mib()
        losses = [run_isolated(fit_tiny_model, seed, timeout=240) for seed in range(FOLDS)]
        parent_growth = rss_mib() - start
        in_process_growth = in_process.result()
    assert all(math.isfinite(loss) for loss in losses)  # every fold sent back its loss
    assert in_process_growth > 3 * PARENT_BOUND_MIB, (
        f"{IN_PROCESS_MODELS} folds in one process should grow it: +{in_process_growth:.1f} MiB")
    assert parent_growth < PARENT_BOUND_MIB, (
        f"{FOLDS} isolated folds grew the parent by {parent_growth:.1f} MiB "
        f"({IN_PROCESS_MODELS} in one process: +{in_process_growth:.1f} MiB)")


def test_result_and_arguments_round_trip():
    assert run_isolated(add, 2, b=3) == 5


def test_child_exception_is_reraised_with_the_child_traceback():
    with pytest.raises(ValueError, match="bad fold") as caught:
        run_isolated(fail_in_child)
    cause = caught.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert "in fail_in_child" in cause.text and 'raise ValueError("bad fold")' in cause.text
    assert os.path.basename(__file__) in cause.text


@pytest.mark.parametrize(
    "job, exitcode, words",
    [(crash_with_sigsegv, -signal.SIGSEGV, "killed by SIGSEGV"), (exit_without_result, 3, "exited with status 3")],
)
def test_child_crash_is_named_with_its_exit_status(job, exitcode, words):
    with pytest.raises(IsolatedCrash, match=words) as caught:
        run_isolated(job)
    assert caught.value.exitcode == exitcode
    assert job.__name__ in str(caught.value)


def test_timeout_kills_the_child(tmp_path):
    pid_file = tmp_path / "pid"
    started = time.monotonic()
    with pytest.raises(IsolatedTimeout, match="did not finish within 3 s") as caught:
        run_isolated(sleep_after_writing_pid, str(pid_file), timeout=3)
    assert time.monotonic() - started < 3 + 5  # killed at the deadline, not when the child is done
    assert caught.value.exitcode == -signal.SIGKILL
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(int(pid_file.read_text()), 0)


def test_child_applies_the_parents_patches_and_options(tf):
    tf_patches.apply_all(only=["graph_growth_guard"], graph_growth_guard="finalize")
    child = run_isolated(finalize_mode_in_child, timeout=240)
    assert child["status"] == "applied"
    assert child["error"] is not None and "TF_PATCHES_GRAPH_GROWTH=finalize" in child["error"]


def test_fresh_graph_clears_keras_state_and_the_default_graph(tf):
    before = tf.compat.v1.get_default_graph()
    with fresh_graph():
        tf.keras.layers.Dense(1)
        tf.keras.layers.Dense(1)
    assert tf.compat.v1.get_default_graph() is not before
    assert tf.keras.layers.Dense(1).name == "dense"  # Keras' name counters start again


def test_fresh_graph_inside_a_nested_graph_warns_and_goes_on(tf):
    with tf.Graph().as_default():
        with pytest.warns(IsolationWarning, match="nested graphs"):
            with fresh_graph():
                tf.constant(1.0)


def test_importing_and_using_fresh_graph_without_tensorflow_imports_nothing():
    imported = run_fresh("""
        import json, sys
        from tf_patches.isolation.local import fresh_graph
        import tf_patches.patches.graph_growth_guard
        with fresh_graph():
            pass
        print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras'))))
    """)
    assert imported == []


# map_isolated: run_isolated per item, several at a time.

def item_and_pid(item: int) -> tuple:
    return item, os.getpid()


def statuses_in_child(item: int) -> dict:
    return {row.name: row.status for row in tf_patches.report().rows}


def fail_on_one(item: int) -> int:
    if item == 1:
        raise ValueError(f"bad item {item}")
    return item


def segfault_on_one(item: int) -> int:
    if item == 1:
        crash_with_sigsegv()
    return item


def sleep_writing_pid(item: str) -> str:
    with open(item, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(120)
    return item


def test_map_isolated_runs_each_item_in_a_fresh_process_in_order():
    results = tf_patches.map_isolated(item_and_pid, range(5), max_in_flight=2)
    assert [item for item, _ in results] == list(range(5))
    pids = {pid for _, pid in results}
    assert len(pids) == 5 and os.getpid() not in pids
    assert tf_patches.map_isolated(item_and_pid, []) == []


def test_map_isolated_children_get_the_callers_patches():
    tf_patches.apply_all(only=["graph_growth_guard"], graph_growth_guard="finalize")
    for statuses in tf_patches.map_isolated(statuses_in_child, [0, 1]):
        assert statuses.pop("graph_growth_guard") in ("applied", "pending")
        assert set(statuses.values()) == {"skipped"}


def test_map_isolated_failures_name_the_item_and_stop_the_rest(tmp_path):
    with pytest.raises(ValueError, match="bad item 1") as caught:
        tf_patches.map_isolated(fail_on_one, [0, 1, 2], max_in_flight=1)
    assert isinstance(caught.value.__cause__, RemoteTraceback)
    assert "items[1]" in str(caught.value.__cause__) and "in fail_on_one" in caught.value.__cause__.text
    assert any("items[1]" in note for note in caught.value.__notes__)

    with pytest.raises(IsolatedCrash, match=r"segfault_on_one\(items\[1\]\).*killed by SIGSEGV") as crash:
        tf_patches.map_isolated(segfault_on_one, [0, 1, 2])
    assert crash.value.exitcode == -signal.SIGSEGV

    # A time-out: the item past its deadline is named, and the items still running are killed.
    slow = [str(tmp_path / f"pid{index}") for index in range(2)]
    started = time.monotonic()
    with pytest.raises(IsolatedTimeout, match=r"sleep_writing_pid\(items\[0\]\) did not finish within 4 s"):
        tf_patches.map_isolated(sleep_writing_pid, slow, timeout=4, max_in_flight=2)
    assert time.monotonic() - started < 4 + 5
    for path in slow:
        with pytest.raises(ProcessLookupError):  # killed and reaped, the other item's too
            os.kill(int(open(path).read()), 0)


def test_map_isolated_checks_max_in_flight():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_in_flight"):
            tf_patches.map_isolated(item_and_pid, [1], max_in_flight=bad)
