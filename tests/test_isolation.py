"""run_isolated and fresh_graph on real TensorFlow: model-per-fold memory stays in the child,
the child's result, exception, crash and time-out come back as they should, the parent's patches
reach the child, and fresh_graph clears the session state.

The functions the children run are defined at module level here: a spawned child imports this
module (not TensorFlow, which each job imports itself) to find them.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import tf_patches
from tf_patches.core.gate import parse_version
from tf_patches.isolation.local import (
    IsolatedCrash,
    IsolatedError,
    IsolatedTimeout,
    IsolationWarning,
    RemoteTraceback,
    fresh_graph,
    run_isolated,
)

from tf_patches.testing import rss_bytes

from tf_patches.session.processes import GRACE_S

from .fresh import ROOT, ctrl_c_works, fresh_env, run_fresh

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


def start_group_and_sleep(path: str, grandchild: str = "sleep 300") -> str:
    """Start a grandchild (a shell command: no Python, no TF), write "<our pid> <its pid>" to
    ``path``, then sleep far past any test's time-out."""
    started = subprocess.Popen(["sh", "-c", grandchild])
    with open(path + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {started.pid}")
    os.replace(path + ".tmp", path)  # whole: the parent polls for it
    time.sleep(120)
    return path


def start_stubborn_group_and_sleep(path: str) -> str:
    """As above, with a grandchild that ignores SIGTERM: only the SIGKILL after the grace ends it."""
    return start_group_and_sleep(path, "trap '' TERM; exec sleep 300")


def start_grandchild_and_return(path: str) -> int:
    """Leave a grandchild running, and return at once."""
    return subprocess.Popen(["sleep", "300"]).pid


def return_then_linger(item: int) -> int:
    """Send the result, then stay 60 s on the way out (multiprocessing joins non-daemon threads)."""
    threading.Thread(target=time.sleep, args=(60,)).start()
    return item


def linger_or_sleep(item: int) -> int:
    """items[0] returns and lingers; the others sleep past any test's time-out."""
    if item == 0:
        return return_then_linger(item)
    time.sleep(120)
    return item


class LoadsOnlyInItsChild:
    """Pickles in its child, fails to unpickle anywhere else (a class whose module the parent
    lacks, or whose ``__setstate__`` needs the child's state, fails the same way)."""

    def __init__(self, pid: int):
        self.pid = pid

    def __reduce__(self):
        return _only_in_child, (self.pid,)


def _only_in_child(pid: int) -> "LoadsOnlyInItsChild":
    if os.getpid() != pid:
        raise RuntimeError("this object is only valid in the process that made it")
    return LoadsOnlyInItsChild(pid)


def unpicklable_here(item: int) -> LoadsOnlyInItsChild:
    return LoadsOnlyInItsChild(os.getpid())


def unpicklable_anywhere(item: int):
    return lambda: item


def live(pid: int) -> bool:
    """Whether ``pid`` is a process that is not a zombie (a zombie is dead, only not reaped yet
    by init, which adopted it)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except FileNotFoundError:
        return False
    return text[text.rindex(")") + 2] != "Z"


def group_pids(path) -> list:
    return [int(pid) for pid in Path(path).read_text().split()]


def wait_for_files(paths, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(path) for path in paths):
        assert time.monotonic() < deadline, f"not written: {paths}"
        time.sleep(0.05)


def marked_processes(marker: str) -> list:
    """The live processes whose environment holds ``marker`` (``NAME=value``): every descendant
    of the process it was given to, wherever it was re-parented."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as environ:
                    if marker.encode() in environ.read().split(b"\0") and live(int(entry)):
                        found.append(int(entry))
            except OSError:
                continue
    return found


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
        pytest.skip("a Keras model-per-fold loop grows in one process from TF 2.14 on (docs/measurements.md)")
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


def test_timeout_ends_the_childs_whole_group_sigterm_then_sigkill(tmp_path):
    pid_file = str(tmp_path / "pids")
    started = time.monotonic()
    with pytest.raises(IsolatedTimeout, match="did not finish within 3 s") as caught:
        run_isolated(start_stubborn_group_and_sleep, pid_file, timeout=3)
    elapsed = time.monotonic() - started
    assert caught.value.exitcode == -signal.SIGTERM  # asked first
    # The grandchild ignores SIGTERM: the SIGKILL after the grace ended it, at the deadline, not
    # when the child would be done.
    assert GRACE_S - 0.5 < elapsed - 3 < GRACE_S + 5, elapsed
    assert [pid for pid in group_pids(pid_file) if live(pid)] == []


def test_a_call_that_returns_leaves_nothing_running(tmp_path):
    grandchild = run_isolated(start_grandchild_and_return, str(tmp_path))
    assert not live(grandchild)


@pytest.mark.parametrize("timeout", [3e6, 10**400], ids=["35 days: past poll()'s 2**31 - 1 ms", "past any float"])
def test_a_timeout_of_any_finite_size_runs_the_call(timeout):
    assert run_isolated(add, 2, b=3, timeout=timeout) == 5


@pytest.mark.parametrize("timeout", [0, -1, math.nan, math.inf, -math.inf, "5", True, [1]])
def test_a_timeout_that_is_not_a_positive_finite_number_is_refused_before_anything_starts(timeout):
    for call in (lambda: run_isolated(add, 1, timeout=timeout),
                 lambda: tf_patches.map_isolated(add, [1], timeout=timeout)):
        with pytest.raises(ValueError, match=r"^timeout must be a positive, finite number of seconds"):
            call()
    assert multiprocessing.active_children() == []


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

    # A time-out: the item past its deadline is named, and the items still running are ended,
    # with what they started.
    slow = [str(tmp_path / f"pids{index}") for index in range(2)]
    started = time.monotonic()
    with pytest.raises(IsolatedTimeout, match=r"start_group_and_sleep\(items\[0\]\) did not finish within 4 s"):
        tf_patches.map_isolated(start_group_and_sleep, slow, timeout=4, max_in_flight=2)
    assert time.monotonic() - started < 4 + 5
    assert [pid for path in slow for pid in group_pids(path) if live(pid)] == []


def test_a_lingering_exit_blocks_neither_the_loop_nor_another_items_timeout():
    """items[0] returns, then lingers 60 s at exit; items[1] runs past its 4 s: its time-out
    comes at 4 s, not after items[0]'s 30 s exit grace."""
    started = time.monotonic()
    with pytest.raises(IsolatedTimeout, match=r"linger_or_sleep\(items\[1\]\) did not finish within 4 s"):
        tf_patches.map_isolated(linger_or_sleep, [0, 1], timeout=4, max_in_flight=2)
    assert time.monotonic() - started < 4 + 8


def test_a_result_that_does_not_pickle_either_way_is_an_isolated_error_naming_the_item():
    with pytest.raises(IsolatedError, match=r"^map_isolated: unpicklable_here\(items\[0\]\) returned a result "
                                            r"that cannot be unpickled here: RuntimeError: this object is only valid"):
        tf_patches.map_isolated(unpicklable_here, [0])
    with pytest.raises(IsolatedError, match=r"^run_isolated: unpicklable_anywhere returned a result that "
                                            r"cannot be pickled back"):
        run_isolated(unpicklable_anywhere, 0)


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT (Ctrl-C)"])
def test_a_signal_to_the_parent_ends_every_group_and_the_resource_tracker(tmp_path, number):
    """A parent in map_isolated, two items each with a grandchild; the parent alone is signalled
    (its children lead sessions of their own: no terminal's Ctrl-C reaches them). Every process
    the parent started, multiprocessing's resource tracker included, is gone after it."""
    marker = f"ISOLATION_TEST_MARKER={tmp_path}"
    paths = [str(tmp_path / f"pids{index}") for index in range(2)]
    code = ("import sys, tf_patches; from tests.test_isolation import start_group_and_sleep\n"
            "if __name__ == '__main__':\n"
            "    tf_patches.map_isolated(start_group_and_sleep, sys.argv[1:], max_in_flight=2)\n")
    name, value = marker.split("=", 1)
    parent = subprocess.Popen([sys.executable, "-c", code, *paths], env=fresh_env({name: value}), cwd=str(ROOT),
                              stderr=subprocess.PIPE, start_new_session=True, preexec_fn=ctrl_c_works)
    try:
        wait_for_files(paths)
        assert len(marked_processes(marker)) >= 6  # parent, tracker, 2 children, 2 grandchildren
        parent.send_signal(number)
        parent.wait(timeout=30)
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
    assert parent.returncode == -number, parent.stderr.read()[-3000:]  # it dies by the signal, as it would have
    deadline = time.monotonic() + 10  # the tracker leaves when its pipe's last writer is gone
    while marked_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marked_processes(marker) == []


def count_running(folder: str) -> int:
    """Mark this item running (a file of its own), give the others 1 s to start, and count the
    items running now."""
    mine = os.path.join(folder, str(os.getpid()))
    Path(mine).touch()
    time.sleep(1.0)
    running = len(os.listdir(folder))
    os.remove(mine)
    return running


def test_map_isolated_runs_at_most_max_in_flight_at_once(tmp_path):
    """An item's place is freed once its process is gone: never more than max_in_flight run."""
    counts = tf_patches.map_isolated(count_running, [str(tmp_path)] * 5, max_in_flight=2)
    assert 1 <= max(counts) <= 2, counts


def test_map_isolated_checks_max_in_flight():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_in_flight"):
            tf_patches.map_isolated(item_and_pid, [1], max_in_flight=bad)


def test_map_isolated_gives_each_item_its_own_seed(tf):
    """Issue 22: 0.2 seeded every item with the parent's seed, so all drew the same numbers. Item
    i now draws what derive_seed(seed, "map_isolated", i) gives, and its report says so."""
    from .seeding import draws_after, seeded_draws

    tf_patches.apply_all(deterministic=True, seed=3)
    items = tf_patches.map_isolated(seeded_draws, [0, 1], max_in_flight=2, timeout=240)
    for index, (reason, *values) in enumerate(items):
        assert f"derive_seed(3, 'map_isolated', {index}) for map_isolated items[{index}]" in reason
        assert values == draws_after(tf_patches.derive_seed(3, "map_isolated", index))
    assert items[0][1:] != items[1][1:]


README_SEED_SCRIPT = """\
import json, os, sys
import tf_patches

tf_patches.apply_all(deterministic=True, seed=5)  # at the top, as the README shows
if os.environ.get("SEED_TEST_TF_AT_TOP"):
    import tensorflow  # the patches install here, in the parent and in each child's re-import
from tests.seeding import seeded_draws

if __name__ == "__main__":
    print(json.dumps(tf_patches.map_isolated(seeded_draws, [0, 1], max_in_flight=2, timeout=240)))
"""


@pytest.mark.parametrize("tf_at_top", [False, True], ids=["tf-imported-in-fn", "tf-imported-at-top"])
def test_map_isolated_items_draw_with_their_own_seed_under_the_readmes_pattern(tf, tmp_path, tf_at_top):
    """Issue 32 (5): each spawned child imports the script again, whose top-level apply_all(seed=5)
    ran before the item's settings: every item drew with 5 (or one derived from its process
    name) while its report claimed derive_seed(5, 'map_isolated', i)."""
    from .seeding import draws_after

    script = tmp_path / "train.py"
    script.write_text(README_SEED_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=str(ROOT),
                          env=fresh_env({"SEED_TEST_TF_AT_TOP": "1" if tf_at_top else None}))
    assert done.returncode == 0, done.stderr[-3000:]
    items = json.loads(done.stdout.strip().splitlines()[-1])
    for index, (reason, *values) in enumerate(items):
        derived = tf_patches.derive_seed(5, "map_isolated", index)
        assert f"seed {derived} (derive_seed(5, 'map_isolated', {index}) for map_isolated items[{index}])" in reason
        assert values == draws_after(derived), reason


def exit_with(status: int) -> None:
    sys.exit(status)  # through the interpreter's whole shutdown: slower than os._exit


class StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


class ReduceRaises(Exception):
    def __reduce__(self):
        raise RuntimeError("no pickle for you")


class RebuildsAsAnInt(Exception):
    def __reduce__(self):
        return int, (7,)


def raise_odd(kind: str) -> None:
    raise {"str": StrRaises, "reduce": ReduceRaises, "int": RebuildsAsAnInt}[kind]("odd")


def test_exit_statuses_are_reported_as_they_happened_and_odd_exceptions_come_back():
    """Issue 32 (8, 9): the parent ended the child's group while sys.exit(5) was still on its way
    out, and reported SIGTERM (10 of 10 runs); an exception whose __str__ or __reduce__ raises
    did the same; one that unpickles as an int escaped as a bare AttributeError."""
    for status in (5, 0, 5):
        with pytest.raises(IsolatedCrash, match=f"exit_with ended without a result: .* exited with status {status}$") as caught:
            run_isolated(exit_with, status)
        assert caught.value.exitcode == status
    with pytest.raises(IsolatedCrash, match=r"exit_with\(items\[0\]\) .* exited with status 5") as caught:
        tf_patches.map_isolated(exit_with, [5])
    assert caught.value.exitcode == 5
    with pytest.raises(StrRaises) as raised:
        run_isolated(raise_odd, "str")
    assert isinstance(raised.value.__cause__, RemoteTraceback)
    for kind, name in (("reduce", "ReduceRaises: odd"), ("int", "RebuildsAsAnInt: odd")):
        with pytest.raises(IsolatedError, match=f"raised {name} \\(it cannot be rebuilt here\\)") as raised:
            run_isolated(raise_odd, kind)
        assert isinstance(raised.value.__cause__, RemoteTraceback) and "raise_odd" in raised.value.__cause__.text


def fork_a_helper_and_return(path: str) -> int:
    """A helper forked without exec (fork-based pools, DataLoader-style workers, a daemon): it
    inherits every descriptor, multiprocessing's sentinel pipe included, and sleeps on."""
    pid = os.fork()
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    Path(path).write_text(str(pid))
    return pid


def test_a_forked_helper_delays_nothing_and_goes_with_the_child(tmp_path):
    """Issue 32 (6): the parent awaited the child's exit on multiprocessing's sentinel, a pipe
    the helper holds: the call returned only after the 30 s exit grace."""
    path = str(tmp_path / "helper")
    started = time.monotonic()
    helper = run_isolated(fork_a_helper_and_return, path)
    assert time.monotonic() - started < 20  # the exit grace is 30 s
    assert helper == int(Path(path).read_text()) and not live(helper)


def ignore_sigterm_and_sleep(path: str) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # slow to honour SIGTERM: only SIGKILL ends it
    Path(path + ".tmp").write_text(str(os.getpid()))
    os.replace(path + ".tmp", path)
    time.sleep(120)


def map_stubborn_items(folder: str) -> None:
    tf_patches.map_isolated(ignore_sigterm_and_sleep, [os.path.join(folder, f"inner{i}") for i in range(2)],
                            max_in_flight=2)


def test_a_nested_timeout_ends_the_inner_items_too(tmp_path):
    """Issue 32 (7): each inner item leads its own session; the outer time-out's SIGKILL (after
    its 2 s grace) came before the inner map_isolated's own, and the inner items ran on under
    PID 1."""
    paths = [str(tmp_path / f"inner{i}") for i in range(2)]
    with pytest.raises(IsolatedTimeout, match=r"map_stubborn_items\(items\[0\]\) did not finish within 20 s"):
        tf_patches.map_isolated(map_stubborn_items, [str(tmp_path)], timeout=20)
    pids = [int(Path(path).read_text()) for path in paths]  # both started well within the 20 s
    deadline = time.monotonic() + 5  # SIGKILLed: gone at once, but for the kernel's own pace
    while any(map(live, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [pid for pid in pids if live(pid)] == []


def finish_late_or_linger_without_result(item: int) -> int:
    """Item 0 returns after 3 s; item 1 closes its result pipe (a crash, known at once) and lingers."""
    if item == 0:
        time.sleep(3)
        return 0
    time.sleep(0.3)
    os.closerange(3, 1024)
    time.sleep(60)
    return 1


def test_a_ctrl_c_during_the_stop_cuts_the_exit_grace_short():
    """A failure stops the items; a child that ended without a result is left its exit grace (30 s)
    but for an interrupt: a Ctrl-C that comes during that grace ends it at once."""
    code = ("import os, signal, threading, tf_patches\n"
            "from tests.test_isolation import finish_late_or_linger_without_result\n"
            "if __name__ == '__main__':\n"
            "    threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
            "    tf_patches.map_isolated(finish_late_or_linger_without_result, [0, 1])\n")
    parent = subprocess.Popen([sys.executable, "-c", code], env=fresh_env(), cwd=str(ROOT),
                              stderr=subprocess.PIPE, start_new_session=True, preexec_fn=ctrl_c_works)
    try:
        parent.wait(timeout=20)  # not the 30 s grace
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
            parent.wait()
    assert b"KeyboardInterrupt" in parent.stderr.read()


def test_a_timed_out_command_that_dropped_the_mark_is_ended_too():
    """supervise() past its time-out ends the marked processes, and the command itself though it
    exec'd with another environment (env -i): it does not run on to its end."""
    from tf_patches.session import processes

    with processes.Signals() as signals:
        child = subprocess.Popen(["env", "-i", "sleep", "30"])
        returncode, timed_out = processes.supervise(child, signals, processes.Marked("TF_PATCHES_NO_SUCH_MARK", "x"),
                                                    timeout=1)
    assert timed_out and returncode == -signal.SIGKILL
