"""keras_seed: after tf.random.set_seed(s) alone, Keras (3, tf_keras, 2.10+) draws the default seeds
of layers, initializers and Dropout from Python's random. Fresh processes on real TF with the
Keras that tf.keras is (Keras 3 on the newest venv, Keras 2.12 on the oldest) and tf_keras
(TF_USE_LEGACY_KERAS=1): stock differs from run to run, "warn" names the builder's line and
changes no value, "follow" repeats across processes, keras.utils.set_random_seed keeps stock's."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tf_patches.core import registry
from tf_patches.core.environment import Environment
from tf_patches.core.options import resolve

from .fresh import fresh_env

PROGRAM = '''
import json, random, sys, warnings
mode = sys.argv[1]
import tf_patches
if mode != "stock":
    tf_patches.apply_all(keras_seed=mode)
import numpy as np
import tensorflow as tf
keras = tf.keras
KERAS3 = str(getattr(keras, "__version__", "2")).startswith("3")

def build():
    dense = keras.layers.Dense(3)  # DENSE
    dense.build((None, 2))  # BUILD
    drop = keras.layers.Dropout(0.5)  # DROPOUT
    out = {"w": np.asarray(dense.kernel).ravel().tolist(),
           "mask": np.asarray(drop(tf.ones([1, 32]), training=True)).ravel().tolist()}
    if KERAS3:
        flip = keras.layers.RandomFlip()  # FLIP
        out["flip"] = np.asarray(flip(tf.reshape(tf.range(32.0), [8, 2, 2, 1]), training=True)).ravel().tolist()
    return out

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    tf.random.set_seed(1)
    state = random.getstate()
    alone = build()
    untouched = random.getstate() == state
    random.setstate(state)  # the same Python state again (not a seed): stock draws the same seeds
    tf.random.set_seed(1)
    again = build()
    random.seed(2)  # Python's random seeded by hand: Keras's default seeds repeat, stock's
    tf.random.set_seed(1)
    python_seeded = build()
    keras.utils.set_random_seed(1)
    seeded = build()
shown = [(w.filename, w.lineno) for w in caught if w.category.__name__ == "ReproducibilityWarning"]
print(json.dumps({"alone": alone, "again": again, "seeded": seeded, "python_seeded": python_seeded, "untouched": untouched,
                  "warnings": shown, "keras3": KERAS3,
                  "row": tf_patches.report()["keras_seed"].reason if mode != "stock" else ""}))
'''
STACKS = {"tf.keras": {"TF_USE_LEGACY_KERAS": None}, "tf_keras": {"TF_USE_LEGACY_KERAS": "1"}}


def _lines():
    return {marker: number for number, line in enumerate(PROGRAM.splitlines(), start=1)
            for marker in ("DENSE", "BUILD", "DROPOUT", "FLIP") if line.endswith(f"# {marker}")}


def _run(path, mode, variables):
    proc = subprocess.run([sys.executable, str(path), mode], env=fresh_env(variables), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_default_seeds_follow_tf_set_seed_only_in_follow_mode(tf, tmp_path, stack):
    if stack == "tf_keras" and (importlib.util.find_spec("tf_keras") is None
                                or tuple(int(p) for p in tf.__version__.split(".")[:2]) < (2, 16)):
        pytest.skip("tf_keras is not installed with a TF >= 2.16 here")
    path = tmp_path / "build_layers.py"
    path.write_text(PROGRAM)
    modes = ("stock", "warn", "follow", "follow")
    with ThreadPoolExecutor(2) as pool:  # two cores: two processes side by side
        stock, warn, follow, follow2 = pool.map(lambda mode: _run(path, mode, STACKS[stack]), modes)

    # The trap, stock: Python's random is drawn (its state moves) and the weights differ between
    # processes after the same tf.random.set_seed(1); Keras 3's Dropout and RandomFlip too.
    assert not stock["untouched"]
    assert stock["alone"]["w"] != warn["alone"]["w"]
    if stock["keras3"]:
        assert stock["alone"]["mask"] != warn["alone"]["mask"]
        assert stock["alone"]["flip"] != warn["alone"]["flip"]
    assert stock["warnings"] == []

    # warn: the builder's line named (Keras 3 draws when the layer is made, Keras 2 at its build),
    # once per line; values as stock's: the same Python state gives the same values, and with
    # keras.utils.set_random_seed the same values as stock's process.
    lines = _lines()
    expected = ([lines["DENSE"], lines["DROPOUT"], lines["FLIP"]] if warn["keras3"] else [lines["BUILD"]])
    assert warn["warnings"] == [[str(path), line] for line in expected]
    assert warn["row"].startswith("detecting: ")
    for run in (stock, warn):
        assert run["again"] == run["alone"]
    assert warn["seeded"] == stock["seeded"] and warn["python_seeded"] == stock["python_seeded"]

    # follow: two processes identical, Python's random untouched, set_seed(1) again restarts the
    # stream; once keras.utils.set_random_seed seeds Python's random, stock's values.
    assert follow["alone"] == follow2["alone"] and follow["alone"] != stock["alone"]
    assert follow["untouched"] and follow["again"] == follow["alone"]
    assert follow["seeded"] == stock["seeded"] and follow["python_seeded"] == stock["python_seeded"]
    assert follow["warnings"] == [] and follow["row"].startswith("fixing (follow): ")


def test_python_seeded_is_seen_from_apply_all_on_before_tf_is_imported():
    from tf_patches.core.context import PatchContext
    from tf_patches.patches import keras_seed

    import random

    original = random.seed
    ctx = PatchContext("keras_seed", Environment(), {"keras_seed": "follow"})
    keras_seed.PATCH.prepare(ctx)  # what apply_all runs at once; install waits for `import tensorflow`
    try:
        source = keras_seed._SEEDS.sources[ctx]  # the patch's own state, kept by its ctx
        random.seed(None)  # reseeded from the OS: still not repeatable
        assert not source.python_seeded
        random.seed(3)
        assert source.python_seeded and random.random() == random.Random(3).random()  # seeded as stock
    finally:
        ctx.revert()
    assert random.seed == original


def test_revert_gives_random_seed_back_where_a_module_bound_it_by_name():
    """Issue 39: opt_einsum's `from random import seed as random_seed`, imported while the patch
    watched random.seed, kept the watch after revert_all(). A fresh process, no TF."""
    code = """
import json, random, tf_patches
original = random.seed
tf_patches.apply_all(keras_seed="warn")
import opt_einsum.path_random as late
bound = late.random_seed is not original
tf_patches.revert_all()
print(json.dumps([bound, late.random_seed is original, random.seed is original]))
"""
    proc = subprocess.run([sys.executable, "-c", code], env=fresh_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == [True, True, True]


def test_gated_to_keras_2_10_and_later():
    spec = registry.by_name("keras_seed")
    options = resolve(registry.all_options(), {}, environ={})
    assert spec.check(Environment(version="2.9.3", complete=True), options)[0] is False
    assert spec.check(Environment(version="2.10.0", complete=True), options)[0] is not False
    assert spec.trap is not None and spec.trap.apply_kwargs == 'keras_seed="follow"'
