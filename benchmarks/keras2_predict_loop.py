"""keras2_predict_loop: memory growth and time per ``model.predict(x)`` call on one in-memory batch
(8 rows, a tiny model), unpatched vs patched, with ``model(x, training=False).numpy()`` as the
floor, a fresh process each, one run. The patch applies to Keras 2 (TF < 2.15): run this with such
an interpreter (scripts/dev.sh bench uses the newest TF, where the patched row reads "skipped").

    PYTHONPATH=. python benchmarks/keras2_predict_loop.py [calls] [--smoke]
"""

from __future__ import annotations

from _fresh import run, sized

CALLS = sized(300, 5, 0)  # smoke: predict costs ≈0.1 s a call on Keras 3
WARMUP = sized(20, 2)
CODE = """
    import json, time
    import numpy as np
    import tf_patches
    if {patched}:
        tf_patches.apply_all(only=["keras2_predict_loop"])
    import tensorflow as tf
    import keras
    from tf_patches.testing import rss_bytes
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    x = np.random.default_rng(0).random((8, 4), dtype=np.float32)
    step = {step}
    for _ in range({warmup}):
        step()
    start, t0 = rss_bytes(), time.perf_counter()
    for _ in range({calls}):
        step()
    seconds = time.perf_counter() - t0
    print(json.dumps({{"kib_per_call": (rss_bytes() - start) / 1024 / {calls}, "us_per_call": seconds / {calls} * 1e6,
                      "status": tf_patches.report().status("keras2_predict_loop"),
                      "versions": f"TF {{tf.__version__}}, Keras {{keras.__version__}}"}}))
"""
PREDICT = "lambda: model.predict(x, verbose=0)"


def measure(patched: bool, step: str) -> dict:
    return run(CODE.format(patched=patched, step=step, calls=CALLS, warmup=WARMUP))


rows = {
    "predict, unpatched": measure(False, PREDICT),
    "predict, patched": measure(True, PREDICT),
    "model(x) floor": measure(False, "lambda: model(x, training=False).numpy()"),
}
print(f"model.predict(x) on 8 rows, {CALLS} calls, fresh process each ({rows['predict, patched']['versions']})")
print(f"{'':20}{'KiB/call':>10}{'µs/call':>10}  patch")
for name, row in rows.items():
    print(f"{name:20}{row['kib_per_call']:>10.1f}{row['us_per_call']:>10.0f}  {row['status']}")
unpatched, patched = rows["predict, unpatched"], rows["predict, patched"]
print(f"unpatched / patched µs/call = {unpatched['us_per_call'] / patched['us_per_call']:.1f}x")
