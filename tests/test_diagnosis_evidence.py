"""The evidence each diagnosed process writes into its snapshot (issue 20), on real TensorFlow:

- ``sites``: the user's line that makes each signature's units, here this file's own lines;
- ``collection``: a program that builds Keras models in a loop leaves garbage that one full
  collection frees (objects and heap bytes), a clean loop none;
- ``heap``: glibc here, with in-use and held bytes; jemalloc named when one is ``LD_PRELOAD``-ed
  (parsing checked on a synthetic ``/proc/self/maps`` too, which every machine runs);
- ``models_built`` and ``clear_session_calls``: a loop's models and calls, counted once each.

Sites are checked in this process (it shares one TF with the suite); the rest in two fresh
processes run side by side: each fresh TF costs ≈5 s.
"""

from __future__ import annotations

import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List

import pytest

import tf_patches
from tf_patches.core.signature import Sites
from tf_patches.diagnosis import heap as heap_module
from tf_patches.diagnosis.sampler import Diagnosis
from tf_patches.diagnosis.snapshot import Snapshot

from .fresh import run_fresh
from .test_diagnosis import (CUSTOM_GRADIENT, GENERATOR, GRAPH, KERAS2, PY_FUNCTION, SEED, applies,
                             custom_gradient_traces, generator_datasets, keras_predicts)

HERE = os.path.abspath(__file__)
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
MODELS, CLEARS = 12, 3


def line_of(marker: str) -> int:
    """The line of this file that carries ``# <marker>`` (where the program makes its units)."""
    with open(HERE, encoding="utf-8") as source:
        for number, text in enumerate(source, 1):
            if text.rstrip().endswith(f"# {marker}") and "line_of" not in text:
                return number
    raise AssertionError(f"no line marked {marker}")


def diagnosed(*programs: Callable[[], None]) -> Snapshot:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with tf_patches.diagnose() as diagnosis:
            for program in programs:
                program()
    return diagnosis.snapshot()


def seeded_draws(n: int) -> None:
    import tensorflow as tf

    tf.random.set_seed(1234)
    for _ in range(n):
        tf.random.uniform([]).numpy()  # site: seed


def py_function_calls(n: int) -> None:
    import tensorflow as tf

    x = tf.constant(1.0)
    for _ in range(n):
        tf.py_function(lambda v: v + 1, [x], tf.float32)  # site: py_function


def growing_session(runs: int) -> None:
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [])
        with tf.compat.v1.Session(graph=graph) as session:
            for _ in range(runs):
                fetch = tf.square(x) + 1.0  # site: graph
                session.run(fetch, {x: 2.0})


@pytest.fixture(scope="module")
def in_process(tf) -> Snapshot:
    # 300 draws and 100 py_function calls: past the exact first 16 events, so the sampled share
    # is exercised too; 60 runs add 2 ops each after the Session's first 10.
    programs: List[Callable[[], None]] = [lambda: seeded_draws(300), lambda: py_function_calls(100),
                                          lambda: growing_session(60)]
    if applies(GENERATOR):
        programs.append(generator_datasets(10))
    if applies(CUSTOM_GRADIENT):
        programs.append(custom_gradient_traces(40))
    if applies(KERAS2):
        programs.append(keras_predicts(12))
    return diagnosed(*programs)


def test_sites_name_the_line_that_makes_the_units(in_process):
    sites = in_process.sites
    counts = in_process.counts()
    for name, marker, units in ((SEED, "site: seed", 300), (PY_FUNCTION, "site: py_function", 100),
                                (GRAPH, "site: graph", 100)):  # graph: 2-3 ops per run after 10
        filename, line, function, count = sites[name][0]
        assert (filename, line) == (HERE, line_of(marker)), (name, sites[name])
        assert function in ("seeded_draws", "py_function_calls", "growing_session")
        # Sampled past the first 16, shared out: the sites add up to the units counted.
        assert counts[name] >= units
        assert sum(row[3] for row in sites[name]) == counts[name], (sites[name], counts[name])
    for name in (GENERATOR, CUSTOM_GRADIENT, KERAS2):  # the other probes that see their unit made
        if applies(name):
            assert sites[name][0][0].endswith(os.path.join("tests", "test_diagnosis.py")), sites[name]
    assert all(len(rows) <= Sites.KEPT for rows in sites.values())


def test_sites_sampling_keeps_the_proportions():
    sites = Sites(lambda frame: None)
    for event in range(1000):  # two lines, 3:1, after 16 events that all came from one
        how = sites.tick()
        if how:
            sites.add(("f.py", 2 if event >= 16 and (event // 64) % 4 == 3 else 1, "g"), 1, how)
    rows = sites.top()
    assert sum(row[3] for row in rows) == 1000
    assert [row[1] for row in rows] == [1, 2]
    assert 0.6 < rows[0][3] / 1000 < 0.9


def test_heap_in_process_is_glibc_with_figures(in_process):
    heap = in_process.heap
    assert heap["allocator"] == "glibc"
    assert 0 < heap["in_use_bytes"] <= heap["held_bytes"] < heap["rss_bytes"]
    assert all(len(row) == 3 for row in in_process.heap_samples)


def test_allocator_from_maps_and_preload():
    maps = "\n".join([
        "55d0c0000000-55d0c0021000 r-xp 00000000 08:01 123 /usr/bin/python3.11",
        "7f0000000000-7f0000100000 r-xp 00000000 08:01 456 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
        "7f0000200000-7f0000400000 r-xp 00028000 08:01 789 /usr/lib/x86_64-linux-gnu/libc.so.6",
        "7f0000500000-7f0000600000 rw-p 00000000 00:00 0 ",
    ])
    detect = heap_module.detect
    assert detect(0x7F0000000100, maps, "", True) == "jemalloc"
    assert detect(0x7F0000300000, maps, "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", True) == "glibc"
    # No mapping known (anonymous, unreadable): LD_PRELOAD, then glibc where it is the C library.
    assert detect(0x7F0000500100, maps, "libfoo.so:/opt/lib/libtcmalloc_minimal.so.4", True) == "tcmalloc"
    assert detect(None, None, "", True) == "glibc"
    assert detect(None, None, "", False) == "other"
    assert heap_module.allocator_of("/lib/ld-musl-x86_64.so.1") == "other"


FRESH = """
    import json, sys, tf_patches
    diagnosis = tf_patches.diagnose(interval=0.2).start()
    import numpy as np
    import tensorflow as tf

    x = np.zeros((8, 4), "float32")
    if {models}:
        for _ in range({clears}):
            tf.keras.backend.clear_session()
        for _ in range({models}):  # models in a loop, no clear_session: garbage in cycles
            model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8),
                                         tf.keras.layers.Dense(1)])
            model(x)
        inputs = tf.keras.Input((4,))
        model = tf.keras.Model(inputs, tf.keras.layers.Dense(1)(inputs))  # one functional model
    else:
        y = tf.constant(1.0)
        for _ in range(3000):
            tf.add(y, 1.0)
    diagnosis.stop()
    snapshot = diagnosis.snapshot().to_dict()
    # Keras' and TF's own functions back once stopped (a staticmethod's too).
    snapshot["left"] = [f.__code__.co_filename for f in (tf.keras.Model.__new__, tf.compat.v1.reset_default_graph)
                        if "tf_patches" in f.__code__.co_filename]
    print(json.dumps({{key: snapshot.get(key) for key in ("collection", "heap", "models_built",
                                                          "clear_session_calls", "evidence_failed", "left")}}))
"""


@pytest.fixture(scope="module")
def fresh() -> Dict[str, Any]:
    runs = {"models": (FRESH.format(models=MODELS, clears=CLEARS), None),
            "clean": (FRESH.format(models=0, clears=0),
                      {"LD_PRELOAD": JEMALLOC} if os.path.exists(JEMALLOC) else None)}
    with ThreadPoolExecutor(len(runs)) as pool:
        futures = {name: pool.submit(run_fresh, code, env) for name, (code, env) in runs.items()}
        return {name: future.result() for name, future in futures.items()}


def released(collection: Dict[str, Any]) -> Dict[str, int]:
    """Objects and heap bytes freed by the program's full collections and the one at stop."""
    freed = (collection["heap_in_use_before"] or 0) - (collection["heap_in_use_after"] or 0)
    return {"objects": collection["objects"] + collection["gen2_found"],
            "bytes": freed + (collection["gen2_freed_bytes"] or 0)}


def test_collection_releases_the_garbage_of_models_built_in_a_loop(fresh):
    models, clean = released(fresh["models"]["collection"]), released(fresh["clean"]["collection"])
    # Measured: 4,488 objects and 133 KiB freed for 30 small models (Keras 3), 3,064 and 627 KiB
    # (Keras 2.12); 11 objects and 0 bytes for the clean loop.
    assert models["objects"] >= 100 * MODELS and models["bytes"] >= 1024 * MODELS, fresh["models"]
    assert clean["objects"] < 200 and clean["bytes"] < 16 * 1024, fresh["clean"]
    final = fresh["models"]["collection"]
    assert final["rss_before"] > 0 and final["at"] > 0 and final["threshold"][0] > 0
    # Python's own objects, outside the C heap's figures: thousands of blocks freed (8,881 measured).
    assert final["python_blocks_before"] - final["python_blocks_after"] >= 100 * MODELS, final


def test_models_built_and_clear_session_calls_counted(fresh):
    models = fresh["models"]
    assert models["models_built"] == MODELS + 1, models
    assert models["clear_session_calls"] == CLEARS
    assert models["evidence_failed"] is None
    assert models["left"] == [], "the counters' wrappers outlived the diagnosis"
    clean = fresh["clean"]
    assert clean["models_built"] == 0 and clean["clear_session_calls"] == 0


def test_heap_names_the_allocator_it_runs_under(fresh):
    assert fresh["models"]["heap"]["allocator"] == "glibc"
    assert fresh["models"]["heap"]["in_use_bytes"] > 0
    if os.path.exists(JEMALLOC):  # where none is installed, test_allocator_from_maps_and_preload
        heap = fresh["clean"]["heap"]
        assert heap["allocator"] == "jemalloc"
        assert heap["in_use_bytes"] is None and heap["held_bytes"] is None and heap["rss_bytes"] > 0


def test_probe_outside_a_diagnosis_keeps_no_sites(tf):
    from tf_patches.patches.seed_kernel_cache import FreshSeedKernels

    assert FreshSeedKernels().sites.tick() == 0 and FreshSeedKernels().sites.top() == []
    assert isinstance(Diagnosis().snapshot().sites, dict)
