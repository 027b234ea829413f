"""keras2_predict_loop: memory growth and time per ``model.predict(x)`` call on one in-memory batch
(8 rows, a tiny model), unpatched vs patched, with ``model(x, training=False).numpy()`` as the
floor, a fresh process each, one run. The patch applies to Keras 2 (TF < 2.15): run this with such
an interpreter (scripts/dev.sh bench uses the newest TF, where the patched row reads "skipped").

    PYTHONPATH=. python benchmarks/keras2_predict_loop.py [calls] [--smoke]
"""

from __future__ import annotations

from _fresh import Loop, leak_loop, sized

CALLS = sized(300, 5, 0)  # smoke: predict costs ≈0.1 s a call on Keras 3
WARMUP = sized(20, 2)
SETUP = """
    import numpy as np
    import keras
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    x = np.random.default_rng(0).random((8, 4), dtype=np.float32)
"""
VERSIONS = 'f"TF {tf.__version__}, Keras {keras.__version__}"'


def measure(patched: bool, step: str) -> Loop:
    return leak_loop("keras2_predict_loop", step, setup=SETUP, calls=CALLS, warmup=WARMUP, patched=patched,
                     extra=VERSIONS, timeout=None)


rows = {
    "predict, unpatched": measure(False, "model.predict(x, verbose=0)"),
    "predict, patched": measure(True, "model.predict(x, verbose=0)"),
    "model(x) floor": measure(False, "model(x, training=False).numpy()"),
}
print(f"model.predict(x) on 8 rows, {CALLS} calls, fresh process each ({rows['predict, patched'].extra})")
print(f"{'':20}{'KiB/call':>10}{'µs/call':>10}  patch")
for name, row in rows.items():
    print(f"{name:20}{row.growth.growth / 1024 / CALLS:>10.1f}{row.growth.seconds_per_iteration * 1e6:>10.0f}"
          f"  {row.status}")
unpatched, patched = rows["predict, unpatched"], rows["predict, patched"]
print(f"unpatched / patched µs/call = "
      f"{unpatched.growth.seconds_per_iteration / patched.growth.seconds_per_iteration:.1f}x")
