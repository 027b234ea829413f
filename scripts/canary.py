"""The canary: is each patch's bug still in the TensorFlow this runs under? (``dev.sh nightly``)

One small probe per registered patch and advisory, each in a fresh process: the bug is measured
unpatched first, then the patch is applied and its report row read. One line per patch:

- ``still needed``: the bug reproduces unpatched;
- ``fixed upstream``: unpatched is clean (set the gate's ``fixed_in``);
- ``broken by a moved symbol``: the report row says ``failed``;
- ``cannot be checked on this build``: GPU-only, NVIDIA-only, Keras-2-only.

A verdict the gate disagrees with (still needed but skipped, fixed but applied) is flagged; the
exit status is 1 when a row is broken, a probe fails or a flag is raised. Sizes follow
shared/FINDINGS.md: a few minutes on 2 cores.

    python scripts/canary.py [NAME...]
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import warnings
import weakref
from typing import Any, Callable, Dict, Optional, Tuple

import tf_patches
from tf_patches.core import registry
from tf_patches.patches import keras2_predict_loop, rfft_guard
from tf_patches.testing import measure_growth, rss_bytes

KIB = 1024
# A probe returns (bug reproduced: True / False, or None when it cannot be checked here; what it measured).
Probe = Tuple[Optional[bool], str]
PROBES: Dict[str, Callable[[], Probe]] = {}
# apply_all keywords under which a patch installs on this CPU machine (as in tests/test_lifecycle.py),
# so that its row tells whether its symbols are still there.
APPLY: Dict[str, Dict[str, Any]] = {
    "op_determinism": {"deterministic": True},
    "rfft_guard": {"env": rfft_guard.REPORTED_MACHINE},
}


def probe(name: str) -> Callable[[Callable[[], Probe]], Callable[[], Probe]]:
    def register(fn: Callable[[], Probe]) -> Callable[[], Probe]:
        PROBES[name] = fn
        return fn
    return register


def per_1000(fn: Callable[[], Any], calls: int, warmup: int) -> float:
    """KiB of RSS per 1,000 calls of ``fn`` (least-squares slope after warm-up)."""
    return measure_growth(fn, calls, warmup, samples=5).slope * 1000 / KIB


@probe("seed_kernel_cache")
def _seed() -> Probe:
    import tensorflow as tf

    tf.random.set_seed(1234)  # TF 36164: ≈35,000 KiB per 1,000 calls on 2.12–2.21, 0.3 with an op seed
    kib = per_1000(lambda: tf.random.uniform([]).numpy(), 2000, 200)
    return kib > 1000, f"{kib:,.0f} KiB per 1,000 seeded tf.random.uniform calls"


@probe("custom_gradient_registry")
def _model_per_fold() -> Probe:
    import tensorflow as tf
    from tensorflow.python.framework import ops

    def entries() -> int:
        return sum(k.startswith("CustomGradient-") for k in list(ops._gradient_registry._registry))

    x = tf.random.stateless_uniform([64, 8], seed=[1, 2])
    y = tf.random.stateless_uniform([64, 1], seed=[3, 4])

    def fold() -> None:  # FINDINGS' model-per-fold loop: 2.21 grows ≈3.8 MB per model
        model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"),
                                     tf.keras.layers.Dense(1)])
        model.compile("adam", "mse")
        model.fit(x, y, epochs=1, batch_size=32, verbose=0)
        tf.keras.backend.clear_session()
        gc.collect()

    folds = 8
    fold()  # warm-up: allocator pools, Keras' first-use caches
    start, start_entries = rss_bytes(), entries()
    for _ in range(folds):
        fold()
    mb = (rss_bytes() - start) / 1e6 / folds
    return mb > 1.0, (f"{mb:+.2f} MB and {(entries() - start_entries) / folds:.1f} registry "
                      f"entries per Keras model fit and cleared ({folds} folds)")


@probe("from_generator_release")
def _from_generator() -> Probe:
    import tensorflow as tf

    class Payload:
        pass

    refs = []
    for _ in range(3):
        payload = Payload()
        refs.append(weakref.ref(payload))
        dataset = tf.data.Dataset.from_generator(lambda p=payload: iter([1, 2]), output_types=tf.int32)
        list(dataset)
        del dataset, payload
    gc.collect()
    kept = sum(ref() is not None for ref in refs)
    return kept > 0, f"{kept} of 3 generators' captures kept after the dataset was dropped"


@probe("eager_py_function")
def _py_function() -> Probe:
    import tensorflow as tf

    x = tf.constant(1.0)
    kib = per_1000(lambda: tf.py_function(lambda v: v + 1, [x], tf.float32), 1500, 100)
    return kib > 1000, f"{kib:,.0f} KiB per 1,000 eager tf.py_function calls"


@probe("v1_graph_seed")
def _v1_seed() -> Probe:
    import tensorflow as tf

    tf.random.set_seed(1234)
    tf.compat.v1.disable_eager_execution()
    op = tf.random.uniform([]).op
    seeds = (op.get_attr("seed"), op.get_attr("seed2"))
    return seeds == (0, 0), f"graph-mode draw after the switch: seed, seed2 = {seeds}" + (
        " (unseeded)" if seeds == (0, 0) else "")


@probe("graph_growth_guard")
def _graph_growth() -> Probe:
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    c = tf.constant(2.0)
    with tf.compat.v1.Session() as sess, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        before = len(sess.graph.get_operations())
        for _ in range(200):
            sess.run(tf.square(c))  # a new op per run, the loop bug the guard catches
        grown = len(sess.graph.get_operations()) - before
    silent = not caught
    return grown >= 200 and silent, (f"+{grown} ops over 200 runs, "
                                      f"{'no warning' if silent else f'{len(caught)} warning(s)'} from TF")


@probe("py311_eager_op_leak")
def _eager_op() -> Probe:
    import tensorflow as tf

    mb = per_1000(lambda: tf.zeros([1]), 30000, 2000) * 100 * KIB / 1e6
    # TF 62551: 9 MB per 100,000 calls on 2.12–2.15, 64 on 2.16, 0 from 2.17 (Python 3.11)
    return mb > 3, f"{mb:.1f} MB per 100,000 eager tf.zeros calls"


@probe("op_determinism")
def _determinism() -> Probe:
    import tensorflow as tf
    from tf_patches.demo import probe as reproducibility_probe

    grads = reproducibility_probe()["crop_and_resize_grad"]  # 3 gradients computed in a row
    differ = not bool(tf.reduce_all(grads == grads[0]))
    if not differ:  # the GPU kernels are the patch's main case: a clean CPU says nothing of them
        return None, "CPU crop_and_resize gradient repeatable here; GPU kernels need a GPU"
    return True, "CPU crop_and_resize gradients differ between runs without op determinism"


@probe("keras2_predict_loop")
def _keras2_predict() -> Probe:
    version = keras2_predict_loop.keras_version() or "none"
    if not version.startswith("2."):
        return None, f"Keras 2 only; this build has Keras {version}"
    import tensorflow as tf

    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    data = tf.zeros([8, 4])
    kib = per_1000(lambda: model.predict(data, verbose=0), 200, 20)
    return kib > 50_000, f"{kib:,.0f} KiB per 1,000 predict calls"  # 2.12–2.14: ≈250,000


@probe("rfft_guard")
def _rfft() -> Probe:
    return None, "nvidia-tensorflow 1.15.5 with a GPU only (benchmarks/rfft_guard.py on one)"


@probe("gpu_nondeterministic_ops")
def _gpu_ops() -> Probe:
    return None, "GPU only: NVIDIA's status table, not measurable on a CPU"


def child(name: str) -> None:
    """In a fresh process: the probe, unpatched; then the patch applied and its row."""
    bug, measured = PROBES[name]()
    import tensorflow  # noqa: F401  (imported, every patch installs now or fails: no "pending" row)

    row = tf_patches.apply_all(only=[name], **APPLY.get(name, {}))[name]
    print(json.dumps({"bug": bug, "measured": measured, "status": row.status, "reason": row.reason}))


def verdict(result: Dict[str, Any]) -> Tuple[str, str]:
    """(verdict, flag): the flag says where the gate disagrees with what was measured."""
    status, reason, bug = result["status"], result["reason"], result["bug"]
    if status == "failed":
        return "broken by a moved symbol", "see the report's reason"
    if bug is None:
        return "cannot be checked on this build", ""
    if bug:
        return "still needed", f"but skipped: {reason}" if status == "skipped" else ""
    return "fixed upstream", "" if status == "skipped" else "but still applied: set its gate's fixed_in"


def run(name: str) -> Dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_PATCHES_")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", name], env=env, capture_output=True,
                              text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return {"error": "probe timed out after 300 s"}
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(names: Tuple[str, ...]) -> int:
    environment = tf_patches.detect()
    tf = f"{environment.distribution} {environment.version}"
    print(f"tf-patches canary on {tf}, Python {environment.python_version}", flush=True)
    alarms = 0
    for name in names or registry.names():
        if name not in PROBES:
            print(f"{tf}  {name:26} no probe: add one to scripts/canary.py")
            alarms += 1
            continue
        result = run(name)
        if "error" in result:
            print(f"{tf}  {name:26} probe failed: {result['error']}", flush=True)
            alarms += 1
            continue
        found, flag = verdict(result)
        alarms += found == "broken by a moved symbol" or bool(flag)
        row = result["status"] + ("" if result["status"] in ("applied", "advised") else f" ({result['reason']})")
        print(f"{tf}  {name:26} {found:31} {result['measured']}; report: {row}"
              + (f"; {flag}" if flag else ""), flush=True)
    return 1 if alarms else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2])
    else:
        sys.exit(main(tuple(sys.argv[1:])))
