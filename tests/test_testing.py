"""tf_patches.testing and its pytest plugin on real TensorFlow: each check passes on clean code
and fails, with a message that locates the problem, on a planted leak or planted
non-determinism (unseeded draws)."""

from __future__ import annotations

import importlib.metadata
import re
import textwrap

import numpy as np
import pytest

from tf_patches.testing import (
    Growth,
    assert_no_leak,
    assert_reproducible,
    check_reproducible,
    measure_growth,
)
from tf_patches.testing.reproducible import _compare

from .fresh import left_running, run_fresh

pytest_plugins = ["pytester"]
PLANTED = 64 * 1024  # bytes a planted leak keeps per call


def draws():
    """No seed anywhere: reproducible only when apply_all(deterministic=True) seeds TF."""
    import tensorflow as tf

    return {"w": tf.random.normal([64]), "b": tf.zeros([2])}


def test_measure_growth_fits_the_slope_of_a_planted_leak():
    kept = []
    growth = measure_growth(lambda: kept.append(bytearray(PLANTED)), iterations=300, warmup=20, samples=11)
    assert PLANTED <= growth.slope <= 1.1 * PLANTED
    assert growth.iterations == (0, 20, 50, 80, 110, 140, 170, 200, 230, 260, 290, 320)
    assert growth.growth >= 300 * PLANTED
    assert growth.seconds_per_iteration > 0
    assert Growth.from_dict(growth.to_dict()) == growth


def test_memory_freed_earlier_cannot_hide_a_leak():
    # Freed blocks pinned between live ones stay in the C heap, where a leak would reuse them
    # without RSS growing, unless the free pages are given back before measuring.
    freed, pinned = [], []
    for _ in range(600):
        freed.append(bytearray(PLANTED))
        pinned.append(bytearray(1000))
    del freed
    kept = []
    growth = measure_growth(lambda: kept.append(bytearray(PLANTED)), iterations=200, warmup=10, samples=5)
    assert growth.slope > 0.8 * PLANTED


def test_assert_no_leak_shows_the_readings_and_slope_of_a_planted_leak():
    kept = []

    def grows():
        kept.append(bytearray(PLANTED))

    with pytest.raises(AssertionError) as caught:
        assert_no_leak(grows, max_bytes_per_iter=1024, iterations=200, warmup=10, samples=5)
    message = str(caught.value)
    assert message.startswith("test_assert_no_leak_shows_the_readings_and_slope_of_a_planted_leak.<locals>.grows "
                              "leaks: 6")
    assert "bytes per call" in message and "bound 1,024 bytes per call" in message
    assert message.count("\n") == 1 + 6  # header, then one line per reading (before warm-up + 5)
    assert "(before warm-up)" in message


def test_the_36164_loop_leaks_unpatched_and_not_patched():
    result = run_fresh("""
        import json
        import tf_patches
        import tensorflow as tf
        from tf_patches.testing import assert_no_leak
        tf.random.set_seed(1234)
        out = {}
        def explicit_seed():
            tf.random.uniform([], seed=7).numpy()
        out["clean"] = assert_no_leak(explicit_seed, 1024, iterations=1000).slope
        try:
            assert_no_leak(lambda: tf.random.uniform([]).numpy(), 1024, iterations=300, warmup=50)
        except AssertionError as exc:
            out["stock"] = str(exc)
        tf_patches.apply_all(only=["seed_kernel_cache"])
        out["patched"] = assert_no_leak(lambda: tf.random.uniform([]).numpy(), 1024, iterations=1000).slope
        print(json.dumps(out))
    """)
    assert result["clean"] <= 1024 and result["patched"] <= 1024
    assert "<lambda> leaks: " in result["stock"]
    slope = float(result["stock"].split("leaks: ")[1].split(" bytes")[0].replace(",", ""))
    assert slope > 20_000  # ≈ 36 KB per call (docs/measurements.md: 35 MiB per 1,000 calls)


@pytest.mark.parametrize("call, error", [
    (lambda: measure_growth(42), TypeError),
    (lambda: measure_growth(print, iterations=0), ValueError),
    (lambda: measure_growth(print, iterations=2.5), TypeError),
    (lambda: measure_growth(print, warmup=-1), ValueError),
    (lambda: measure_growth(print, samples=1), ValueError),
    (lambda: measure_growth(print, iterations=5, samples=7), ValueError),
    (lambda: assert_no_leak(print, max_bytes_per_iter="1k"), TypeError),
    (lambda: assert_no_leak(print, max_bytes_per_iter=-1), ValueError),
    (lambda: check_reproducible(draws, runs=1), ValueError),
    (lambda: check_reproducible(lambda: 1), TypeError),
    (lambda: check_reproducible(42), TypeError),
    (lambda: check_reproducible("no such thing"), ValueError),
    (lambda: check_reproducible("missing_script.py"), ValueError),
    (lambda: check_reproducible(draws, seed=-1), ValueError),
    (lambda: check_reproducible(draws, seed=2**32), ValueError),
    (lambda: check_reproducible(draws, deterministic="yes"), TypeError),
    (lambda: check_reproducible(draws, outputs=["w.npy"]), ValueError),
    (lambda: check_reproducible("x.py", outputs="w.npy"), TypeError),
    (lambda: check_reproducible(draws, timeout=0), ValueError),
])
def test_bad_arguments_raise_before_anything_runs(call, error):
    with pytest.raises(error):
        call()


def test_seeded_runs_of_a_function_are_bit_identical():
    same = assert_reproducible("tests.test_testing:draws", seed=3)
    assert same.names == ("result['w']", "result['b']")
    assert same.applied == "apply_all(deterministic=True, seed=3)"
    assert same.identical and same.differences == ()


# Unseeded initial weights, then training: reproducible only with deterministic=True.
TRAIN = """
    import sys
    import numpy as np
    import tensorflow as tf
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    model.fit(np.ones((8, 3)), np.zeros((8, 2)), epochs=2, verbose=0)
    if sys.argv[1:]:
        model.save_weights(sys.argv[1])
        np.save(sys.argv[2], tf.random.uniform([5]).numpy())
"""


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    path = tmp_path_factory.mktemp("script") / "train.py"
    path.write_text(textwrap.dedent(TRAIN))
    return path


def test_a_script_is_compared_through_the_weights_it_saves(script):
    weights, draws_file = str(script.with_name("model.weights.h5")), str(script.with_name("draws.npy"))
    saved = assert_reproducible(script, outputs=[weights, draws_file], args=[weights, draws_file])
    assert len(saved.names) >= 3 and saved.names[-1] == draws_file  # kernel, bias (+ optimizer state), draws
    assert all(name.startswith(weights + ":") for name in saved.names[:-1])


def test_unseeded_runs_fail_naming_the_first_differing_tensor_index_and_values(script):
    with pytest.raises(AssertionError) as caught:
        assert_reproducible(str(script), deterministic=False)  # no outputs: its globals are compared
    message = str(caught.value)
    assert message.startswith(f"{script} is not reproducible in 2 runs with apply_all(deterministic=False): "
                              "run 2 differs from run 1 in 'model.weights[0] (")
    assert re.search(r"kernel\S*\)' \(float32\[3, 2\]\) at index \(\d, \d\): -?[\d.e-]+ \(bits 0x[0-9a-f]{8}\) "
                     r"in run 1, -?[\d.e-]+ \(bits 0x[0-9a-f]{8}\) in run 2; \d of 6 elements differ\n", message)
    assert "\ndiffering: model.weights[0] (" in message


def test_bits_not_values_are_compared():
    nan = np.array([np.nan, 0.0], dtype=np.float32)
    assert _compare({"x": nan}, {"x": nan.copy()}, 2) == []
    (zero,) = _compare({"x": nan}, {"x": np.array([np.nan, -0.0], dtype=np.float32)}, 2)
    assert "at index (1,): 0.0 (bits 0x00000000) in run 1, -0.0 (bits 0x80000000) in run 2" in zero.message
    (shape,) = _compare({"x": nan}, {"x": nan[:1]}, 3)
    assert shape.message == "'x' is float32[2] in run 1 but float32[1] in run 3"
    (missing,) = _compare({"x": nan}, {}, 2)
    assert missing.message == "'x' is missing from run 2"


def test_importing_testing_and_the_plugin_imports_neither_tensorflow_nor_numpy():
    loaded = run_fresh("""
        import json, sys
        import tf_patches.testing, tf_patches.testing.pytest_plugin
        print(json.dumps([name for name in ("tensorflow", "numpy") if name in sys.modules]))
    """)
    assert loaded == []


PLUGIN_CASES = """
    import pytest

    kept = []

    @pytest.mark.no_leak(max_bytes_per_iter=1024, iterations=200)
    def test_clean(tmp_path):
        sum(range(100))

    @pytest.mark.no_leak(max_bytes_per_iter=1024, iterations=200, warmup=10)
    def test_leaky():
        kept.append(bytearray(64 * 1024))

    @pytest.mark.reproducible(runs=2, seed=5)
    def test_seeded():
        import tensorflow as tf
        return tf.random.normal([16])

    @pytest.mark.reproducible
    def test_with_a_fixture(tmp_path):
        return 1
"""


def test_the_plugin_markers_pass_clean_tests_and_fail_planted_problems(pytester, request):
    pytester.makepyfile(test_cases=PLUGIN_CASES)
    # Installed (CI: pip install -e), the pytest11 entry point loads the plugin; from a checkout, -p does.
    loaded = request.config.pluginmanager.has_plugin("tf_patches")
    result = pytester.runpytest(*([] if loaded else ["-p", "tf_patches.testing.pytest_plugin"]), "--strict-markers")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines([
        "*test_leaky leaks: 6*bytes per call*bound 1,024 bytes per call*",
        "*test_with_a_fixture: a @pytest.mark.reproducible test runs in fresh processes, so it must be a "
        "module-level function without fixtures",
    ])


def test_the_plugin_is_registered_as_a_pytest11_entry_point():
    try:
        importlib.metadata.distribution("tf-patches")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("tf-patches is not installed (pip install -e .): entry points exist only when installed")
    plugins = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="pytest11")}
    assert plugins.get("tf_patches") == "tf_patches.testing.pytest_plugin"


LEAVES_A_HELPER = """
    import os, subprocess, sys, time
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                              env={"PATH": os.environ.get("PATH", "")})  # no mark of ours in its environment
    with open(sys.argv[1], "w") as out:
        out.write(str(helper.pid))
    time.sleep(120)
"""


def test_a_timed_out_run_ends_what_it_started(tmp_path):
    """Issue 38/39: check_reproducible's time-out ends the run's whole tree, not only the child."""
    script, pid_file = tmp_path / "leaves.py", tmp_path / "helper.pid"
    script.write_text(textwrap.dedent(LEAVES_A_HELPER))
    with pytest.raises(RuntimeError, match="did not finish in 15 s"):
        check_reproducible(str(script), args=[str(pid_file)], timeout=15)
    assert left_running(pid_file, at_least=1) == [], "the run's helper outlived the time-out"
