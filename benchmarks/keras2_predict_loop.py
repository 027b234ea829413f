"""keras2_predict_loop: memory growth and time per ``model.predict(x)`` call on one in-memory batch
(8 rows, a tiny model), unpatched vs patched, with ``model(x, training=False).numpy()`` as the
floor, a fresh process each, one run, for each Keras 2 this interpreter can give ``tf.keras``: its
stock one (Keras 2 on TF < 2.15; Keras 3 from TF 2.16, where the patched row reads "skipped"), and
tf_keras with ``TF_USE_LEGACY_KERAS=1`` where tf-keras is installed (TF >= 2.16).

    PYTHONPATH=. python benchmarks/keras2_predict_loop.py [calls] [--smoke]
    TF_USE_LEGACY_KERAS=1 PYTHONPATH=. python benchmarks/keras2_predict_loop.py 3000   # tf_keras only

"MiB/1k" is the least-squares slope of RSS over the second half of the readings (the first
≈1,500–2,000 calls after warm-up rise ≈15–30 MiB on any Keras: allocator and caches, see
docs/findings/keras_predict_loops.md), in MiB per 1,000 calls: give ≥ 3,000 calls for a slope.
"""

from __future__ import annotations

import importlib.util
import os

from _fresh import Loop, leak_loop, sized

CALLS = sized(300, 5, 0)  # smoke: predict costs ≈0.1 s a call on Keras 3
WARMUP = sized(50, 2)
SAMPLES = sized(10, 2)
SETUP = """
    import numpy as np
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    x = np.random.default_rng(0).random((8, 4), dtype=np.float32)
    keras_package = tf.keras.Model.__module__.split(".")[0]  # keras or tf_keras
    keras_version = __import__(keras_package).__version__
"""
VERSIONS = 'f"TF {tf.__version__}, tf.keras = {keras_package} {keras_version}"'
POPULATIONS = {"stock tf.keras": None}
if importlib.util.find_spec("tf_keras") is not None:
    POPULATIONS["tf_keras (TF_USE_LEGACY_KERAS=1)"] = "1"
    if os.environ.get("TF_USE_LEGACY_KERAS") == "1":  # asked for: that population only
        del POPULATIONS["stock tf.keras"]


def measure(patched: bool, step: str) -> Loop:
    return leak_loop("keras2_predict_loop", step, setup=SETUP, calls=CALLS, warmup=WARMUP, patched=patched,
                     samples=SAMPLES, extra=VERSIONS, timeout=None)


def second_half_slope(loop: Loop) -> float:
    """MiB per 1,000 calls: least squares over the second half of the readings after warm-up."""
    points = [(n, rss) for n, rss in zip(loop.growth.iterations, loop.growth.rss) if n >= WARMUP]
    points = points[len(points) // 2:] if len(points) >= 4 else points
    mean_x = sum(n for n, _ in points) / len(points)
    mean_y = sum(r for _, r in points) / len(points)
    spread = sum((n - mean_x) ** 2 for n, _ in points) or 1
    return sum((n - mean_x) * (r - mean_y) for n, r in points) / spread * 1000 / 2**20


for population, switch in POPULATIONS.items():
    if switch is None:
        os.environ.pop("TF_USE_LEGACY_KERAS", None)  # the fresh processes inherit this one's environment
    else:
        os.environ["TF_USE_LEGACY_KERAS"] = switch
    rows = {
        "predict, unpatched": measure(False, "model.predict(x, verbose=0)"),
        "predict, patched": measure(True, "model.predict(x, verbose=0)"),
        "model(x) floor": measure(False, "model(x, training=False).numpy()"),
    }
    print(f"\n{population}: model.predict(x) on 8 rows, {CALLS} calls after {WARMUP} warm-up, "
          f"fresh process each ({rows['predict, patched'].extra})")
    print(f"{'':20}{'MiB/1k':>8}{'MiB':>8}{'ms/call':>9}  patch")
    for name, row in rows.items():
        print(f"{name:20}{second_half_slope(row):>8.2f}{row.growth_mib:>8.1f}"
              f"{row.growth.seconds_per_iteration * 1e3:>9.2f}  {row.status}")
    unpatched, patched = rows["predict, unpatched"], rows["predict, patched"]
    print(f"unpatched / patched ms/call = "
          f"{unpatched.growth.seconds_per_iteration / patched.growth.seconds_per_iteration:.1f}x")
