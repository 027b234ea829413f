"""op_determinism on real TensorFlow (and PyTorch's CPU build): repeatable training across fresh
processes, the switch each version band reads, TF's own errors once determinism is on, PyTorch in
every import order, and nothing at all by default."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import random
import sys
import textwrap
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

import tf_patches
from tf_patches.core.context import PatchContext, tf_module
from tf_patches.core.environment import Environment
from tf_patches.patches import op_determinism

from .fresh import run_fresh
from .seeding import draws_after

NAME = "op_determinism"
SEED = 1234
HAVE_TORCH = importlib.util.find_spec("torch") is not None
TF_VARIABLES = (op_determinism.TF_CUDNN_DETERMINISTIC, op_determinism.TF_DETERMINISTIC_OPS,
                op_determinism.TF_CUDNN_USE_FRONTEND)
VARIABLES = TF_VARIABLES + (op_determinism.CUBLAS_WORKSPACE_CONFIG,)

# A convolution, a dense layer, Adam (state), a tf.data pipeline that shuffles and batches. The
# data are fixed; the seeds only reach initial weights and shuffling, so only the patch decides.
TRAIN = """
    import hashlib, json, os, sys
    import tf_patches
    for step in {steps!r}:
        if step == "apply":
            tf_patches.apply_all({keywords})
        else:
            __import__(step)
    import numpy as np
    import tensorflow as tf
    from tf_patches.core.context import tf_module
    x = np.random.default_rng(0).random((256, 8, 8, 1), dtype=np.float32)
    y = (x.mean(axis=(1, 2, 3)) > 0.5).astype(np.float32)
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).batch(32)
    model = tf.keras.Sequential([
        tf.keras.Input((8, 8, 1)),
        tf.keras.layers.Conv2D(4, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(1),
    ])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01),
                  loss=tf.keras.losses.BinaryCrossentropy(from_logits=True))
    model.fit(data, epochs=3, verbose=0)
    row = tf_patches.report()["op_determinism"]
    # Work that differs from run to run on the CPU without the switch (docs/measurements.md): the
    # seeded training above is bit-identical on the CPU even without it.
    from tf_patches.patches.op_determinism import crop_and_resize_gradients
    crops = crop_and_resize_gradients(3).numpy()
    out = {{
        "weights": hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest(),
        "crops": [hashlib.sha256(crop.tobytes()).hexdigest() for crop in crops],
        "status": row.status,
        "reason": row.reason,
        "op_determinism": tf_module("python.framework.config").is_op_determinism_enabled(),
        "cublas": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    }}
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch"] = {{
            "flags": [torch.are_deterministic_algorithms_enabled(),
                      torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark],
            "initial_seed": torch.initial_seed(),
            "draws": torch.rand(3).tolist(),
        }}
    print(json.dumps(out))
"""


def _train(steps, keywords="", env=None):
    if not HAVE_TORCH:
        steps = tuple(step for step in steps if step != "torch")
    clean = dict.fromkeys(VARIABLES)  # None: removed, whatever the caller's environment holds
    return run_fresh(TRAIN.format(steps=steps, keywords=keywords), env={**clean, **(env or {})})


@pytest.fixture(scope="module")
def runs():
    """Three fresh trainings side by side: the same seed given two ways, with torch imported
    after and before apply_all; and a control with another seed, torch imported after TF."""
    jobs = {
        "keywords": (("apply", "torch", "tensorflow"), f"deterministic=True, seed={SEED}", None),
        "variables": (("torch", "apply", "tensorflow"), "",
                      {"TF_PATCHES_DETERMINISTIC": "1", "TF_PATCHES_SEED": str(SEED)}),
        "control": (("apply", "tensorflow", "torch"), f"deterministic=True, seed={SEED + 1}", None),
    }
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {name: pool.submit(_train, *job) for name, job in jobs.items()}
        return {name: future.result() for name, future in futures.items()}


def test_the_same_seed_trains_bit_identical_weights_in_fresh_processes(runs):
    first, second = runs["keywords"], runs["variables"]
    assert first["status"] == second["status"] == "applied", (first["reason"], second["reason"])
    assert first["op_determinism"] and second["op_determinism"]
    assert first["weights"] == second["weights"]
    assert len(set(first["crops"] + second["crops"])) == 1  # within each process and across


def test_without_the_switch_the_cpu_gradient_differs_from_run_to_run(tf):
    """The control of the test above, in this process (no op determinism): the same gradient three
    times is not three times the same, so the test above can fail."""
    assert not tf_module("python.framework.config").is_op_determinism_enabled()
    crops = op_determinism.crop_and_resize_gradients(3).numpy()
    assert not all((crop == crops[0]).all() for crop in crops[1:])


def test_another_seed_trains_other_weights(runs):
    assert runs["control"]["status"] == "applied"
    assert runs["control"]["weights"] != runs["keywords"]["weights"]


@pytest.mark.skipif(not HAVE_TORCH, reason="torch not installed (pip install torch==2.13.0: CPU)")
def test_torch_is_switched_whichever_is_imported_first(runs):
    for name, run in runs.items():
        assert run["torch"]["flags"] == [True, True, False], name
        assert run["cublas"] == op_determinism.CUBLAS_WORKSPACE, name
        assert "PyTorch" in run["reason"], name
    assert runs["keywords"]["torch"]["initial_seed"] == SEED
    assert runs["keywords"]["torch"]["draws"] == runs["variables"]["torch"]["draws"]
    assert runs["control"]["torch"]["initial_seed"] == SEED + 1


def test_importing_the_patch_imports_nothing_heavy():
    loaded = run_fresh("""
        import json, sys
        import tf_patches.patches.op_determinism
        print(json.dumps([name for name in ("tensorflow", "torch", "numpy") if name in sys.modules]))
    """)
    assert loaded == []


def _env(version, **more):
    return Environment.from_dict({"distribution": "tensorflow", "version": version, **more})


@pytest.mark.parametrize("version, nvidia, variables, api", [
    ("1.14.0", False, {"TF_CUDNN_DETERMINISTIC": "1"}, False),
    ("1.15.5+nv22.12", True, {"TF_CUDNN_DETERMINISTIC": "1", "TF_DETERMINISTIC_OPS": "1"}, False),
    ("2.0.4", False, {"TF_CUDNN_DETERMINISTIC": "1"}, False),
    ("2.1.0", False, {"TF_DETERMINISTIC_OPS": "1"}, False),
    ("2.4.4", False, {"TF_DETERMINISTIC_OPS": "1"}, False),
    ("2.5.0", False, {"TF_DETERMINISTIC_OPS": "1", "TF_CUDNN_USE_FRONTEND": "1"}, False),
    ("2.7.4", False, {"TF_DETERMINISTIC_OPS": "1", "TF_CUDNN_USE_FRONTEND": "1"}, False),
    ("2.8.0rc0", False, {}, True),
    ("2.21.0", False, {}, True),
])
def test_each_version_band_gets_its_own_switch(version, nvidia, variables, api):
    env = _env(version, **({"distribution": "nvidia-tensorflow"} if nvidia else {}))
    assert op_determinism.PATCH.gate.check(env)[0] is True
    assert op_determinism.environment_switches(env) == variables
    assert op_determinism.uses_api(env) is api


def test_versions_before_the_first_switch_are_skipped():
    verdict, reason = op_determinism.PATCH.gate.check(_env("1.13.2"))
    assert verdict is False and ">=1.14" in reason


def test_the_report_lists_the_gpu_gaps_of_the_version():
    silent, raising = op_determinism.known_gpu_gaps(_env("2.4.0"))
    assert any("segment" in op for op in silent) and any("crop_and_resize" in op for op in silent)
    assert not raising
    silent, raising = op_determinism.known_gpu_gaps(_env("2.6.0"))
    assert any("segment" in op for op in raising) and any("crop_and_resize" in op for op in raising)
    silent, raising = op_determinism.known_gpu_gaps(_env("2.21.0"))
    assert not silent, "from 2.8 TF raises for every op it knows to be non-deterministic"
    assert not any("segment" in op for op in raising)  # deterministic kernels since 2.7


@pytest.fixture
def no_switches():
    """None of the variables set, and TF's cached reading of TF_DETERMINISTIC_OPS already taken
    while unset, so setting it in this process cannot turn determinism on for later tests."""
    saved = {name: os.environ.pop(name) for name in VARIABLES if name in os.environ}
    config = tf_module("python.framework.config")
    assert not config.is_op_determinism_enabled()
    yield config
    os.environ.update(saved)


def test_an_older_band_gets_its_variables_and_is_told_they_came_late(tf, no_switches):
    context = tf_module("python.eager.context")
    seed_before = context.global_seed()
    report = tf_patches.apply_all(deterministic=True, seed=7, only=[NAME], env=_env("2.6.0"))
    reason = report[NAME].reason
    assert report.status(NAME) == "applied", reason
    assert os.environ["TF_DETERMINISTIC_OPS"] == os.environ["TF_CUDNN_USE_FRONTEND"] == "1"
    assert "only after `import tensorflow`" in reason
    assert "non-deterministic on GPU in TF 2.6.0" in reason
    assert "raises UnimplementedError" in reason
    assert context.global_seed() == 7
    assert not no_switches.is_op_determinism_enabled()  # 2.6's switch is the variable, not the API
    tf_patches.revert_all()
    assert not any(name in os.environ for name in TF_VARIABLES)
    assert context.global_seed() == seed_before


def test_with_determinism_on_tf_raises_its_own_errors(tf, no_switches):
    report = tf_patches.apply_all(deterministic=True, seed=SEED, only=[NAME])
    assert report.status(NAME) == "applied", report[NAME].reason
    assert "enable_op_determinism() on" in report[NAME].reason
    assert not any(name in os.environ for name in TF_VARIABLES)  # 2.8+: the API, no variables
    assert no_switches.is_op_determinism_enabled()
    with pytest.raises(tf.errors.FailedPreconditionError, match="determinism"):
        tf.timestamp()  # a timestamp is a common hidden seed
    with tf.Graph().as_default():  # a TF1-style graph has no seed of its own
        with pytest.raises(RuntimeError, match="require a seed"):
            tf.random.uniform([])
    tf_patches.revert_all()
    assert not no_switches.is_op_determinism_enabled()
    tf.timestamp()


def test_off_by_default_changes_nothing(tf, no_switches):
    context = tf_module("python.eager.context")
    seed_before, state_before = context.global_seed(), random.getstate()
    report = tf_patches.apply_all(only=[NAME])
    assert report.status(NAME) == "skipped"
    assert "opt-in" in report[NAME].reason
    assert not any(name in os.environ for name in VARIABLES)
    assert not no_switches.is_op_determinism_enabled()
    assert context.global_seed() == seed_before and random.getstate() == state_before


def test_torch_flags_come_back_on_revert(tf, no_switches):
    torch = pytest.importorskip("torch")
    cudnn = torch.backends.cudnn

    def flags():
        return torch.are_deterministic_algorithms_enabled(), cudnn.deterministic, cudnn.benchmark

    before = flags()
    report = tf_patches.apply_all(deterministic=True, seed=SEED, only=[NAME])
    assert "PyTorch: seeded" in report[NAME].reason
    assert flags() == (True, True, False)
    assert torch.initial_seed() == SEED
    tf_patches.revert_all()
    assert flags() == before


@pytest.fixture
def probe_module(tmp_path, monkeypatch):
    """A module not imported yet, for post-import hooks."""
    name = f"tfp_probe_{uuid.uuid4().hex}"  # a fresh name: nothing imported or hooked before
    (tmp_path / f"{name}.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_a_failing_import_hook_never_breaks_the_import(probe_module, caplog):
    ctx = PatchContext(NAME, _env("2.21.0"), {})

    def fail(module):
        raise RuntimeError("boom")

    op_determinism._on_import(ctx, probe_module, fail)
    with caplog.at_level(logging.WARNING, logger="tf_patches"):
        assert importlib.import_module(probe_module).VALUE == 1
    assert "boom" in caplog.text


def test_a_reverted_import_hook_does_nothing(probe_module):
    ctx = PatchContext(NAME, _env("2.21.0"), {})
    seen = []
    op_determinism._on_import(ctx, probe_module, seen.append)
    ctx.revert()
    importlib.import_module(probe_module)
    assert seen == []


# -- seeds across processes (issue 22): no process tf-patches seeds repeats another's streams ------

SPAWNED = """
    import json, multiprocessing, random, sys

    def draws():
        import numpy as np
        import tensorflow as tf
        return [random.random(), float(np.random.random()), float(tf.random.uniform([]))]

    def child(queue, own_seed):
        import tf_patches
        tf_patches.apply_all(deterministic=True, seed=7)  # a script's top level, run again by spawn
        import tensorflow
        if own_seed:
            tf_patches.seed_everything(tf_patches.derive_seed(7, "worker", 1))
        queue.put((own_seed, tf_patches.report()["op_determinism"].reason, draws()))

    if __name__ == "__main__":
        import os
        import tf_patches
        tf_patches.apply_all(deterministic=True, seed=7)
        parent = draws()
        context = multiprocessing.get_context("spawn")
        queue = context.Queue()
        workers = [context.Process(target=child, args=(queue, own)) for own in (False, True)]
        for worker in workers:
            worker.start()
        results = {str(own): [reason, values] for own, reason, values in (queue.get(timeout=240) for _ in workers)}
        for worker in workers:
            worker.join()
        print(json.dumps({"pid": os.getpid(), "parent": parent, "children": results}))
"""


def test_spawned_workers_are_not_seeded_like_their_parent(tf, tmp_path):
    """A script's top-level apply_all(deterministic=True) runs again in each spawned worker: 0.2
    seeded every one with 7, so all drew the parent's numbers. Now a worker draws what the seed
    derived from its multiprocessing identity gives (its report says so), or its own seed's."""
    script = tmp_path / "spawning.py"
    script.write_text(textwrap.dedent(SPAWNED))
    result = run_fresh(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')")
    plain_reason, plain = result["children"]["False"]
    own_reason, own = result["children"]["True"]
    assert plain_reason.count("derive_seed(7, 'multiprocessing', 1)") == 1, plain_reason
    assert f"process {result['pid']}, which started this one, was seeded with 7" in plain_reason
    assert result["parent"] == draws_after(7)
    assert all(a != b for a, b in zip(plain, result["parent"]))
    assert plain == draws_after(tf_patches.derive_seed(7, "multiprocessing", 1))
    assert own == draws_after(tf_patches.derive_seed(7, "worker", 1))


def test_the_seed_decision_for_children_and_fan_out_items(monkeypatch):
    from tf_patches.core import seeds

    monkeypatch.setattr(seeds, "_assigned", None)
    monkeypatch.delenv(seeds.ORIGIN_VARIABLE, raising=False)
    monkeypatch.setenv(seeds.SEEDED_BY_VARIABLE, f"{os.getpid()}:7")  # this process itself
    assert op_determinism.seed_decision({"seed": 7}) == (7, "")
    parent = min(pid for pid in seeds._ancestors() if pid > 1)  # PID 1 is never trusted
    monkeypatch.setenv(seeds.SEEDED_BY_VARIABLE, f"{parent}:7")  # a parent seeded with 7
    seed, reason = op_determinism.seed_decision({"seed": 7})
    assert seed == tf_patches.derive_seed(7, "command", *sys.argv) and f"process {parent}, which started" in reason
    assert op_determinism.seed_decision({"seed": 8}) == (8, "")  # another seed: the user's choice
    assert op_determinism.seed_decision({})[0] == 0  # the default 0, not the parent's 7
    for variable, value in seeds.item_variables(7, "map_isolated", 3).items():
        monkeypatch.setenv(variable, value)
    derived = tf_patches.derive_seed(7, "map_isolated", 3)
    origin = " (derive_seed(7, 'map_isolated', 3) for map_isolated items[3])"
    assert op_determinism.seed_decision({"seed": derived}) == (derived, origin)
    assert seeds.ORIGIN_VARIABLE not in os.environ  # read once: this process's children do not inherit it
    assert os.environ["TF_PATCHES_SEED"] == str(derived)


def test_derive_seed_is_reproducible_distinct_and_checked():
    derive = tf_patches.derive_seed
    values = {derive(0, index) for index in range(10_000)}
    assert len(values) == 10_000 and all(0 <= value <= 2**32 - 1 for value in values)
    assert derive(0, "fold", 1) != derive(1, "fold", 1) != derive(0, "fold", 2)
    again = run_fresh("import json, tf_patches; print(json.dumps([tf_patches.derive_seed(5, 'rank', i) for i in range(3)]))",
                      env={"PYTHONHASHSEED": "123"})  # another hash seed: the same values
    assert again == [derive(5, "rank", i) for i in range(3)]
    for bad, error in (((-1, 1), ValueError), ((2**32, 1), ValueError), ((1.0, 1), TypeError),
                       ((True, 1), TypeError), ((1,), TypeError), ((1, 2.5), TypeError), ((1, None), TypeError)):
        with pytest.raises(error):
            derive(*bad)


def test_a_malformed_or_foreign_seed_marker_is_ignored_never_a_failed_patch():
    """Issue 32 (4): a marker with '²' (str.isdigit accepts it, int refuses it) or 5,000 digits
    (int refuses more than 4,300) left op_determinism failed: no switch, no seeds. A
    well-formed marker naming a process that is not this one's parent or ancestor (leaked into
    an image or a CI step) re-seeded a top-level job. In one fresh process, on real TF: each is
    ignored (one ConfigWarning for the malformed ones) and seed 7 is applied as asked."""
    result = run_fresh("""
        import json, os, warnings
        import tensorflow as tf
        import tf_patches
        from tf_patches.core import seeds
        rows = {}
        foreign = os.getppid() + 100000  # a pid that is not among this process's ancestors
        for name, marker in (("superscript", f"{os.getppid()}:²"), ("huge", "9" * 5000 + ":7"),
                             ("huge seed", f"{os.getppid()}:{'7' * 5000}"), ("foreign", f"{foreign}:7"),
                             ("parent", f"{os.getppid()}:7")):
            os.environ[seeds.SEEDED_BY_VARIABLE] = marker
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                row = tf_patches.apply_all(deterministic=True, seed=7)["op_determinism"]
            rows[name] = [row.status, row.reason, float(tf.random.uniform([])),
                          [type(w.message).__name__ for w in caught if seeds.SEEDED_BY_VARIABLE in str(w.message)]]
            tf_patches.revert_all()
        print(json.dumps(rows))
    """)
    tf_patches.seed_everything(7)
    import tensorflow as tf

    seven = float(tf.random.uniform([]))
    for name in ("superscript", "huge", "huge seed", "foreign"):
        status, reason, draw, warned = result[name]
        assert status == "applied" and "seed 7 for" in reason and draw == seven, (name, reason)
        assert warned == ([] if name == "foreign" else ["ConfigWarning"]), (name, warned)
    status, reason, draw, warned = result["parent"]  # the real parent's marker: trusted, a seed of its own
    assert status == "applied" and "which started this one, was seeded with 7" in reason and draw != seven


def test_derive_seed_and_seed_everything_take_numpy_integers_as_apply_all_does(tf, monkeypatch):
    """Issue 32: apply_all(seed=np.int64(5)) worked, derive_seed and seed_everything refused it."""
    import numpy as np

    monkeypatch.delenv("TF_PATCHES_SEEDED_BY", raising=False)  # restored after

    assert tf_patches.derive_seed(np.int64(5), np.int32(1), "fold") == tf_patches.derive_seed(5, 1, "fold")
    assert tf_patches.seed_everything(np.uint32(3))[:3] == ["random", "NumPy", "TensorFlow"]
    assert os.environ["TF_PATCHES_SEEDED_BY"].endswith(":3")
    for bad in (np.float64(1.0), np.bool_(True), True):
        with pytest.raises(TypeError):
            tf_patches.derive_seed(bad, 1)


# -- round two (issue 28): what TF refuses, or leaves unseeded, under op determinism ----------------

# One program for each side: stock TF with op determinism (and tf-patches' defaults applied, which
# leave it alone), or deterministic=True. Each op without a seed, eager, in a tf.function and in a
# Dataset.map; the global generator; Generator.from_non_deterministic_state. Lines marked `# at:`
# are where a warning must point.
ROUND_TWO = """
import hashlib, json, sys, warnings
import tf_patches
PATCHED, KERAS = {patched!r}, {keras!r}
if PATCHED:
    tf_patches.apply_all(deterministic=True, seed=3, only=["op_determinism"])
else:
    tf_patches.apply_all()
import tensorflow as tf
from tensorflow.python.framework import random_seed
from tensorflow.python.ops import stateful_random_ops
from tf_patches.core.context import tf_module
config = tf_module("python.framework.config")
if not PATCHED:
    tf.random.set_seed(3)
    tf.config.experimental.enable_op_determinism()
out = {{"row": tf_patches.report()["op_determinism"].reason}}

def digest(value):
    return hashlib.sha256(tf.io.serialize_tensor(value).numpy()).hexdigest()[:16]

def attempt(call):
    try:
        return call()
    except Exception as exc:
        return "raises " + type(exc).__name__ + ": " + str(exc).splitlines()[0][:100]

# The global generator: made at its first call from the global seed then in effect.
tf.random.set_seed(5)
out["generator"] = attempt(lambda: tf.random.get_global_generator().normal([3]).numpy().tolist())
if PATCHED:
    expected = tf.random.Generator.from_seed(tf_patches.derive_seed(5, "tf.random.get_global_generator"))
    out["generator_expected"] = expected.normal([3]).numpy().tolist()
    out["generator_kept"] = tf.random.get_global_generator() is tf.random.get_global_generator()
tf.random.set_seed(3)

image = tf.reshape(tf.range(2 * 9 * 9 * 2, dtype=tf.float32), [2, 9, 9, 2])
size, boxes = tf.constant([9, 9, 2]), tf.constant([[[0.1, 0.1, 0.9, 0.9]]])
ratio = [1.0, 1.5, 1.5, 1.0]
def joined(sequence):  # a fixed-shape result whatever the sequence's length
    return tf.strings.reduce_join(tf.strings.as_string(sequence), separator=",")
OPS = {{
    "sample_distorted_bounding_box": lambda: tf.image.sample_distorted_bounding_box(size, boxes)[0],
    "compat.v1.sample_distorted_bounding_box":
        lambda: tf.compat.v1.image.sample_distorted_bounding_box(size, boxes)[0],
    "fractional_max_pool": lambda: joined(tf.nn.fractional_max_pool(image, ratio)[1]),
    "compat.v1.fractional_max_pool": lambda: joined(tf.compat.v1.nn.fractional_max_pool(image, ratio)[1]),
    "fractional_avg_pool": lambda: joined(tf.nn.fractional_avg_pool(image, ratio)[2]),
    "compat.v1.fractional_avg_pool": lambda: joined(tf.compat.v1.nn.fractional_avg_pool(image, ratio)[2]),
    "get_global_generator": lambda: tf.random.get_global_generator().normal([2]),
}}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # compat.v1's deprecation notes
    for name, op in OPS.items():
        function = tf.function(op)
        out[name] = {{
            "eager": attempt(lambda: [digest(op()) for _ in range(2)]),
            "function": attempt(lambda: [digest(function()) for _ in range(2)]),
            "map": attempt(lambda: [digest(element) for element in tf.data.Dataset.range(3).map(lambda _: op())]),
        }}

if PATCHED:
    # Seeded as get_seed seeds the next random op: as if given that op seed, and the random op
    # after it draws what it would after any other seedless random op.
    tf.random.set_seed(3)
    op_seed = random_seed.get_seed(None)[1]
    tf.random.set_seed(3)
    pooled = tf.nn.fractional_max_pool(image, ratio)
    after = tf.random.uniform([4])
    out["as_if_seeded"] = all(bool(tf.reduce_all(a == b)) for a, b in
                              zip(pooled, tf.nn.fractional_max_pool(image, ratio, seed=op_seed)))
    tf.random.set_seed(3)
    tf.random.uniform([4])
    out["eager_sequence"] = bool(tf.reduce_all(after == tf.random.uniform([4])))
    pool_first = tf.function(lambda: (tf.nn.fractional_avg_pool(image, ratio)[0], tf.random.uniform([4])))
    uniform_first = tf.function(lambda: (tf.random.uniform([4]), tf.random.uniform([4])))
    out["graph_sequence"] = bool(tf.reduce_all(pool_first()[1] == uniform_first()[1]))

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    out["non_deterministic_state"] = attempt(lambda: tf.random.Generator.from_non_deterministic_state())  # at: state
out["warnings"] = [[w.category.__name__, w.filename, w.lineno, str(w.message)] for w in caught
                   if w.category is tf_patches.ReproducibilityWarning]

if PATCHED:
    made = stateful_random_ops.global_generator
    tf_patches.revert_all()
    out["reverted"] = {{"slot_emptied": stateful_random_ops.global_generator is None,
                       "ops_are_tfs": tf.nn.fractional_max_pool is tf_module("python.ops.nn_ops").fractional_max_pool_v2
                                      and not hasattr(tf.nn.fractional_max_pool, "__tf_patches__")}}
    config.enable_op_determinism()
    out["reverted"]["raises_again"] = str(attempt(tf.random.get_global_generator)).startswith("raises RuntimeError")
    tf_patches.apply_all(deterministic=True, seed=3, only=["op_determinism"])
    own = tf.random.Generator.from_seed(11)
    tf.random.set_global_generator(own)
    out["users_generator_kept"] = tf.random.get_global_generator() is own
    tf_patches.revert_all()
    out["users_generator_kept"] &= stateful_random_ops.global_generator is own

if KERAS:
    # Keras 3's auto-XLA, with Keras told of a GPU (its device query), checked through its own
    # decision function. This Keras (3.7+) turns it off under op determinism itself.
    import keras
    from keras.src.trainers import trainer as keras_trainer
    from tensorflow.python.eager.context import PhysicalDevice
    devices = [PhysicalDevice("/physical_device:CPU:0", "CPU"), PhysicalDevice("/physical_device:GPU:0", "GPU")]
    tf.config.list_physical_devices = lambda device_type=None: [
        d for d in devices if device_type in (None, d.device_type)]
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    resolve = keras_trainer.Trainer._resolve_auto_jit_compile
    report = tf_patches.apply_all(deterministic=True, seed=3, only=["op_determinism"])
    keras_out = {{"row": report["op_determinism"].reason,
                  "own_under_determinism": model._resolve_auto_jit_compile(),
                  "resolver_untouched": keras_trainer.Trainer._resolve_auto_jit_compile is resolve}}
    config.disable_op_determinism()
    keras_out["own_without"] = model._resolve_auto_jit_compile()
    tf_patches.revert_all()
    # A Keras before 3.7 (keras PR 20315): its model_supports_jit without the determinism check.
    keras_trainer.model_supports_jit = lambda model: all(layer.supports_jit for layer in model._flatten_layers())
    config.enable_op_determinism()
    keras_out["old_stock"] = model._resolve_auto_jit_compile()
    report = tf_patches.apply_all(deterministic=True, seed=3, only=["op_determinism"])
    keras_out["old_row"] = report["op_determinism"].reason
    keras_out["old_patched"] = model._resolve_auto_jit_compile()
    model.compile(loss="mse")
    keras_out["old_compiled_auto"] = model.jit_compile
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.compile(loss="mse", jit_compile=True)  # at: jit
    keras_out["old_compiled_true"] = model.jit_compile
    keras_out["warnings"] = [[w.filename, w.lineno, str(w.message)] for w in caught
                             if w.category is tf_patches.ReproducibilityWarning]
    tf_patches.revert_all()
    config.enable_op_determinism()
    keras_out["old_reverted"] = [model._resolve_auto_jit_compile(),
                                 keras_trainer.Trainer._resolve_auto_jit_compile is resolve]
    out["keras"] = keras_out
print(json.dumps(out))
"""


def _round_two(tmp_path, name, patched, keras=False):
    script = tmp_path / f"{name}.py"
    script.write_text(textwrap.dedent(ROUND_TWO.format(patched=patched, keras=keras)))
    return run_fresh(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')"), script


def _marked_line(script, mark):
    lines = script.read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if line.rstrip().endswith(f"# at: {mark}"))


KERAS_3 = (importlib.util.find_spec("keras") is not None
           and int(importlib.import_module("importlib.metadata").version("keras").split(".")[0]) >= 3)


@pytest.fixture(scope="module")
def round_two(tmp_path_factory):
    """Two stock processes and two with deterministic=True, side by side (one of those also runs
    the Keras checks)."""
    tmp_path = tmp_path_factory.mktemp("round_two")
    jobs = {"stock": (False, False), "stock_again": (False, False),
            "patched": (True, KERAS_3), "patched_again": (True, False)}
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {name: pool.submit(_round_two, tmp_path, name, *job) for name, job in jobs.items()}
        return {name: future.result() for name, future in futures.items()}


SEEDLESS = ("sample_distorted_bounding_box", "compat.v1.sample_distorted_bounding_box",
            "fractional_max_pool", "compat.v1.fractional_max_pool", "get_global_generator")
FRACTIONAL_AVG = ("fractional_avg_pool", "compat.v1.fractional_avg_pool")
WAYS = ("eager", "function", "map")


def test_stock_refuses_the_seedless_ops_under_op_determinism(round_two):
    stock, _ = round_two["stock"]
    assert "opt-in" in stock["row"]  # tf-patches' defaults leave op determinism alone
    for name in SEEDLESS:
        for way in WAYS:
            outcome = stock[name][way]
            assert isinstance(outcome, str) and outcome.startswith("raises"), (name, way, outcome)
            assert ("RuntimeError" if name == "get_global_generator" else "ValueError") in outcome, outcome
    assert stock["generator"].startswith("raises RuntimeError")
    assert stock["non_deterministic_state"].startswith("raises RuntimeError")
    assert stock["warnings"] == []


def test_stock_fractional_avg_pool_runs_but_differs_between_processes(round_two):
    stock, again = round_two["stock"][0], round_two["stock_again"][0]
    for name in FRACTIONAL_AVG:
        for way in WAYS:
            assert isinstance(stock[name][way], list), stock[name][way]
            assert stock[name][way] != again[name][way], (name, way)


def test_deterministic_runs_each_op_and_repeats_in_a_fresh_process(round_two):
    patched, again = round_two["patched"][0], round_two["patched_again"][0]
    assert "tf.nn.fractional_avg_pool" in patched["row"] and "get_global_generator" in patched["row"]
    for name in SEEDLESS + FRACTIONAL_AVG:
        for way in WAYS:
            outcome = patched[name][way]
            assert isinstance(outcome, list), (name, way, outcome)
            assert outcome == again[name][way], (name, way)
    # Eager calls take the next op seed each time, as seedless random ops do; the map's elements
    # draw from one bounding-box kernel.
    assert patched["sample_distorted_bounding_box"]["eager"][0] != patched["sample_distorted_bounding_box"]["eager"][1]
    assert len(set(patched["sample_distorted_bounding_box"]["map"])) > 1
    # v1 and v2 forms agree where both get the same op seed (each traced function counts from 0).
    for way in ("function", "map"):
        assert patched["fractional_max_pool"][way] == patched["compat.v1.fractional_max_pool"][way]


def test_seedless_ops_take_the_op_seed_get_seed_gives(round_two):
    patched, _ = round_two["patched"]
    assert patched["as_if_seeded"] and patched["eager_sequence"] and patched["graph_sequence"]


def test_the_global_generator_comes_from_the_global_seed_in_effect(round_two):
    patched, again = round_two["patched"][0], round_two["patched_again"][0]
    assert patched["generator"] == patched["generator_expected"] == again["generator"]
    assert patched["generator_kept"]
    assert patched["reverted"] == {"slot_emptied": True, "ops_are_tfs": True, "raises_again": True}
    assert patched["users_generator_kept"]


def test_from_non_deterministic_state_still_raises_and_says_so_at_the_users_line(round_two):
    patched, script = round_two["patched"]
    assert patched["non_deterministic_state"].startswith("raises RuntimeError")
    [(category, filename, line, message)] = patched["warnings"]
    assert category == "ReproducibilityWarning"
    assert (filename, line) == (str(script), _marked_line(script, "state"))
    assert "from_non_deterministic_state" in message and "Generator.from_seed" in message


@pytest.mark.skipif(not KERAS_3, reason="Keras 3 only: Keras 2's jit_compile defaults to None")
def test_keras_auto_xla_is_off_under_op_determinism(round_two):
    """Keras told of a GPU: 3.7+ turns auto-XLA off itself (left alone); a Keras without that check
    (its model_supports_jit as before keras PR 20315) gets it resolved to False, an explicit
    jit_compile=True kept and warned about, and its own answer back on revert. Not run on a GPU."""
    keras, script = round_two["patched"][0]["keras"], round_two["patched"][1]
    assert "off under op determinism itself" in keras["row"]
    assert keras["own_under_determinism"] is False and keras["own_without"] is True
    assert keras["resolver_untouched"]
    assert keras["old_stock"] is True  # the trap: XLA chosen under op determinism
    assert "resolved to False while op determinism is on" in keras["old_row"]
    assert keras["old_patched"] is False and keras["old_compiled_auto"] is False
    assert keras["old_compiled_true"] is True
    [(filename, line, message)] = keras["warnings"]
    assert (filename, line) == (str(script), _marked_line(script, "jit"))
    assert "jit_compile=True" in message and "UnimplementedError" in message
    assert keras["old_reverted"] == [True, True]
