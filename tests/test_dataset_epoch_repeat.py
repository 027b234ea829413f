"""dataset_epoch_repeat and parallel_random_map (they share patches/_dataset_functions.py): fresh
processes on real TF with the Keras that tf.keras is (Keras 3 on the newest venv, Keras 2.12 on the
oldest) and tf_keras (TF_USE_LEGACY_KERAS=1). Stock repeats a seeded random map at every iteration
(and every epoch of fit) and a parallel one differs from iteration to iteration; "warn" names the
map's line and changes no value; "rerandomize" draws new values each iteration, iteration 1 as
stock's, the same in two processes; deterministic=True warns and does not rerandomize silently;
one iterator over repeat(), Dataset.shuffle, a Generator, stateless ops, Keras 3 layers and
unseeded maps are left alone."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tf_patches.core import registry

from .fresh import fresh_env

PROGRAM = '''
import json, os, sys, warnings
mode = sys.argv[1]
import tf_patches
if mode == "deterministic":
    tf_patches.apply_all(deterministic=True, seed=0)
elif mode != "stock":
    tf_patches.apply_all(dataset_epoch_repeat=mode)
import numpy as np
import tensorflow as tf
if os.environ.get("TF_USE_LEGACY_KERAS"):
    import tf_keras as keras
else:
    keras = tf.keras
KERAS3 = str(getattr(keras, "__version__", "2")).startswith("3")
if mode != "deterministic":
    tf.random.set_seed(0)
caught = {}

def flat(dataset):
    return [float(x) for element in dataset.as_numpy_iterator()
            for part in (element if isinstance(element, tuple) else (element,)) for x in np.ravel(part)]

def phase(name, run):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = run()
    caught[name] = [[w.filename, w.lineno, str(w.message)] for w in seen
                    if w.category.__name__ == "ReproducibilityWarning" and "keras_seed" not in str(w.message)]
    return out

def augment(i):
    image = tf.image.random_flip_left_right(tf.reshape(tf.range(12.0), [2, 2, 3]))
    image = tf.image.random_crop(image, [1, 2, 3])
    return (image + tf.random.uniform([1, 2, 3]), tf.random.normal([2]), tf.random.truncated_normal([2]),
            tf.random.uniform([], 0, 100, tf.int64))

def iterations():
    mapped = tf.data.Dataset.range(4).map(augment)  # MAP
    shuffled = tf.data.Dataset.range(4).map(lambda i: tf.random.shuffle(tf.range(6)))  # SHUFFLE
    op_seed = tf.data.Dataset.range(2).map(lambda i: tf.random.uniform([], seed=5))  # OPSEED
    return {"mapped": [flat(mapped) for _ in range(3)], "shuffled": [flat(shuffled) for _ in range(3)],
            "op_seed": [flat(op_seed) for _ in range(2)]}

def fit():
    data = tf.data.Dataset.range(8).map(lambda i: (tf.image.random_flip_left_right(tf.reshape(tf.range(4.0), [2, 2, 1])) + tf.random.uniform([2, 2, 1]), 1.0)).batch(4)  # FIT
    model = keras.Sequential([keras.layers.Flatten(), keras.layers.Dense(1, kernel_initializer="ones")])
    model.compile(keras.optimizers.SGD(0.0), "mse")  # learning rate 0: an epoch's loss depends on its data only
    return model.fit(data, epochs=3, verbose=0).history["loss"]

def quiet():
    out = {}
    once = flat(tf.data.Dataset.range(4).map(lambda i: tf.random.uniform([])).repeat(2))
    out["repeat_continues"] = once[:4] != once[4:]
    shuffled = tf.data.Dataset.range(16).shuffle(16)
    out["shuffle_differs"] = flat(shuffled) != flat(shuffled)
    generator = tf.random.Generator.from_seed(1)
    drawn = tf.data.Dataset.range(4).map(lambda i: generator.uniform([]))
    out["generator_differs"] = flat(drawn) != flat(drawn)
    stateless = tf.data.Dataset.range(4).map(lambda i: tf.random.stateless_uniform([], [1, i]))
    flat(stateless), flat(stateless)
    repeated = tf.data.Dataset.range(8).map(lambda i: (tf.random.uniform([2]), 1.0)).batch(4).repeat()
    model = keras.Sequential([keras.layers.Dense(1, kernel_initializer="ones")])
    model.compile(keras.optimizers.SGD(0.0), "mse")
    losses = model.fit(repeated, epochs=2, steps_per_epoch=2, verbose=0).history["loss"]
    out["one_iterator_continues"] = losses[0] != losses[1]
    # One epoch: nothing repeats (Keras 3 makes the next epoch's iterator ahead, and never reads it).
    model.fit(tf.data.Dataset.range(8).map(lambda i: (tf.random.uniform([2]), 1.0)).batch(4), epochs=1, verbose=0)
    if KERAS3:
        flip = keras.layers.RandomFlip(seed=3)
        flipped = tf.data.Dataset.range(4).map(lambda i: flip(tf.reshape(tf.range(4.0), [1, 2, 2, 1]), training=True))
        flat(flipped), flat(flipped)
    return out

def parallel():
    mapped = tf.data.Dataset.range(64).map(lambda i: tf.random.uniform([]), num_parallel_calls=4)  # PARALLEL
    runs = [flat(mapped) for _ in range(6)]
    tf.data.Dataset.range(8).map(lambda i: tf.random.normal([]), num_parallel_calls=tf.data.AUTOTUNE)  # AUTOTUNE
    flat(tf.data.Dataset.range(8).map(lambda i: tf.random.uniform([]), num_parallel_calls=1))
    seeds = tf.data.Dataset.random(seed=1).batch(2)
    flat(tf.data.Dataset.zip((tf.data.Dataset.range(8), seeds)).map(
        lambda i, seed: tf.random.stateless_uniform([], seed), num_parallel_calls=4))
    return sum(run != runs[0] for run in runs[1:])

def unseeded():
    tf.random.set_seed(None)
    mapped = tf.data.Dataset.range(4).map(lambda i: tf.random.uniform([]))
    return flat(mapped) != flat(mapped)

out = {"keras3": KERAS3, "iterations": phase("iterations", iterations), "fit": phase("fit", fit),
       "quiet": phase("quiet", quiet), "parallel": phase("parallel", parallel)}
if mode != "deterministic":  # op determinism refuses unseeded random ops
    out["unseeded"] = phase("unseeded", unseeded)
out["caught"] = caught
out["rows"] = {row.name: row.reason for row in tf_patches.report()} if mode != "stock" else {}
print(json.dumps(out))
'''
STACKS = {"tf.keras": {"TF_USE_LEGACY_KERAS": None}, "tf_keras": {"TF_USE_LEGACY_KERAS": "1"}}
MARKERS = ("MAP", "SHUFFLE", "OPSEED", "FIT", "PARALLEL", "AUTOTUNE")


def _lines():
    return {marker: number for number, line in enumerate(PROGRAM.splitlines(), start=1)
            for marker in MARKERS if line.endswith(f"# {marker}")}


def _run(path, mode, variables):
    proc = subprocess.run([sys.executable, str(path), mode], env=fresh_env(variables), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.splitlines()[-1])


def _sites(run, phase, trap):
    return [[path, line] for path, line, message in run["caught"][phase] if f"tf-patches: {trap}:" in message]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    path = tmp_path_factory.mktemp("epoch_repeat") / "train.py"
    path.write_text(PROGRAM)
    jobs = [("stock", "tf.keras"), ("warn", "tf.keras"), ("rerandomize", "tf.keras"),
            ("rerandomize", "tf.keras"), ("deterministic", "tf.keras")]
    if importlib.util.find_spec("tf_keras") is not None:
        jobs += [("warn", "tf_keras"), ("rerandomize", "tf_keras")]
    with ThreadPoolExecutor(2) as pool:  # two cores: two processes side by side
        results = list(pool.map(lambda job: _run(path, job[0], STACKS[job[1]]), jobs))
    done = {}
    for (mode, stack), result in zip(jobs, results):
        done.setdefault((mode, stack), []).append(result)
    return str(path), done


def test_stock_repeats_each_iteration_and_parallel_maps_differ(runs):
    _, done = runs
    stock = done[("stock", "tf.keras")][0]
    mapped, shuffled = stock["iterations"]["mapped"], stock["iterations"]["shuffled"]
    assert mapped[0] == mapped[1] == mapped[2] and shuffled[0] == shuffled[1] == shuffled[2]
    assert stock["iterations"]["op_seed"][0] == stock["iterations"]["op_seed"][1]
    assert stock["fit"][0] == stock["fit"][1] == stock["fit"][2]  # every epoch, epoch 1's data
    assert stock["parallel"] >= 1  # of 5 iterations against the first (7 of 7 differed, measured here)
    assert stock["unseeded"]  # without a seed, stock differs every iteration
    assert all(flag for flag in stock["quiet"].values())  # the unaffected cases do draw anew
    assert not any(stock["caught"].values())


def test_warn_names_the_map_line_and_changes_no_value(runs):
    path, done = runs
    lines = _lines()
    stock = done[("stock", "tf.keras")][0]
    warns = [("tf.keras", done[("warn", "tf.keras")][0])]
    if ("warn", "tf_keras") in done:
        warns.append(("tf_keras", done[("warn", "tf_keras")][0]))
    for stack, warn in warns:
        # An explicit op seed repeats as the global seed does (stock, above): warned about too.
        assert _sites(warn, "iterations", "dataset_epoch_repeat") == [
            [path, lines["MAP"]], [path, lines["SHUFFLE"]], [path, lines["OPSEED"]]], stack
        assert _sites(warn, "fit", "dataset_epoch_repeat") == [[path, lines["FIT"]]], stack
        assert _sites(warn, "quiet", "dataset_epoch_repeat") == [], stack
        assert _sites(warn, "unseeded", "dataset_epoch_repeat") == [], stack
        message = warn["caught"]["iterations"][0][2]
        assert "'augment'" in message and "RandomUniform" in message and 'dataset_epoch_repeat="rerandomize"' in message
        assert warn["rows"]["dataset_epoch_repeat"].startswith("detecting: ")
        assert warn["rows"]["parallel_random_map"].startswith("detecting: ")
        # parallel_random_map: at the parallel maps built, not the serial or stateless ones.
        assert _sites(warn, "parallel", "parallel_random_map") == [[path, lines["PARALLEL"]],
                                                                    [path, lines["AUTOTUNE"]]], stack
        parallel_message = [m for _, _, m in warn["caught"]["parallel"] if "parallel_random_map" in m][0]
        assert "enable_op_determinism" in parallel_message and "Dataset.random" in parallel_message
        assert warn["parallel"] >= 1
        if stack == "tf.keras":  # values: stock's, in another process
            for key in ("iterations", "fit", "unseeded", "quiet"):
                if key != "unseeded":
                    assert warn[key] == stock[key], key


def test_rerandomize_draws_anew_each_iteration_the_same_in_two_processes(runs):
    _, done = runs
    stock = done[("stock", "tf.keras")][0]
    first, second = done[("rerandomize", "tf.keras")]
    for key in ("iterations", "fit"):
        assert first[key] == second[key], key
    mapped, shuffled = first["iterations"]["mapped"], first["iterations"]["shuffled"]
    assert mapped[0] != mapped[1] != mapped[2] != mapped[0]
    assert shuffled[0] != shuffled[1] != shuffled[2] != shuffled[0]
    # Iteration 1: stock's values (flip, crop, uniform, normal, truncated normal, uniform int bit
    # for bit; shuffle for its first call: 6 values of the first element).
    assert mapped[0] == stock["iterations"]["mapped"][0]
    assert shuffled[0][:6] == stock["iterations"]["shuffled"][0][:6]
    assert len(set(first["fit"])) == 3  # three epochs, three data sets
    assert first["fit"][0] == stock["fit"][0]  # epoch 1: stock's data
    if ("rerandomize", "tf_keras") in done:  # epoch k reads stream k there too (Keras 2's fit
        # makes an iterator it never reads before its first epoch: not an iteration)
        assert done[("rerandomize", "tf_keras")][0]["fit"] == first["fit"]
    assert not any(_sites(first, phase, "dataset_epoch_repeat") for phase in first["caught"])
    assert first["rows"]["dataset_epoch_repeat"].startswith("fixing (rerandomize): ")


def test_deterministic_true_warns_and_does_not_rerandomize(runs):
    path, done = runs
    run = done[("deterministic", "tf.keras")][0]
    mapped = run["iterations"]["mapped"]
    assert mapped[0] == mapped[1] == mapped[2]  # not turned on silently
    assert _sites(run, "iterations", "dataset_epoch_repeat")[0] == [path, _lines()["MAP"]]
    message = run["caught"]["iterations"][0][2]
    assert "deterministic=True" in message and 'dataset_epoch_repeat="rerandomize"' in message
    # op determinism runs the parallel map serially: it repeats, and nothing is said.
    assert run["parallel"] == 0 and _sites(run, "parallel", "parallel_random_map") == []


def test_declared_as_traps():
    epoch = registry.by_name("dataset_epoch_repeat")
    assert epoch.trap is not None and epoch.trap.too_repeatable
    assert epoch.trap.apply_kwargs == 'dataset_epoch_repeat="rerandomize"'
    parallel = registry.by_name("parallel_random_map")
    assert parallel.trap is not None and not parallel.trap.too_repeatable
    assert [option.name for option in parallel.options] == []
