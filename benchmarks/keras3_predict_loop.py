"""keras3_predict_loop: time per ``model.predict(x)`` call and RSS over the first calls on one
in-memory batch (32 rows, a small Dense model), Keras 3 as ``tf.keras``, unpatched vs patched,
with ``predict_on_batch(x)`` as the floor: a fresh process each, one after the other (timed), in
one run, and the three outputs compared bit for bit.

    PYTHONPATH=. python benchmarks/keras3_predict_loop.py [calls] [--smoke]

"MiB" is RSS from the end of the warm-up (the first call: tracing) to the end of the loop, collected and
trimmed before each reading; "ms/call" the loop's mean. Goals (issue 30): patched ≤ 0.15× stock's
time per call and ≤ 2 MiB over the first 1,000 calls, outputs bit-identical.
"""

from __future__ import annotations

from _fresh import leak_loop, sized

CALLS = sized(1000, 5, 0)
WARMUP = sized(1, 1)
SAMPLES = sized(10, 2)
SETUP = """
    import hashlib
    import numpy as np
    import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(4)])
    x = np.random.default_rng(0).random((32, 16), dtype=np.float32)
    first = model.predict(x, verbose=0)
    digest = hashlib.sha256(first.tobytes()).hexdigest()[:16] + f" {first.dtype} {first.shape}"
"""
NAME = "keras3_predict_loop"
VERSIONS = 'f"TF {tf.__version__}, Keras {keras.__version__}"'


def measure(patched: bool, step: str):
    return leak_loop(NAME, step, setup=SETUP, calls=CALLS, warmup=WARMUP, patched=patched, samples=SAMPLES,
                     extra=f'[{VERSIONS}, digest]', timeout=None)


rows = {
    "predict, unpatched": measure(False, "model.predict(x, verbose=0)"),
    "predict, patched": measure(True, "model.predict(x, verbose=0)"),
    "predict_on_batch": measure(False, "model.predict_on_batch(x)"),
}
unpatched, patched = rows["predict, unpatched"], rows["predict, patched"]
print(f"\nmodel.predict(x) on 32 rows, {CALLS} calls after {WARMUP} warm-up, fresh process each "
      f"({patched.extra[0]})")
print(f"{'':20}{'MiB':>8}{'ms/call':>9}  output sha256, patch")
for name, row in rows.items():
    print(f"{name:20}{row.growth_mib:>8.2f}{row.growth.seconds_per_iteration * 1e3:>9.2f}  "
          f"{row.extra[1]}, {row.status}")
ratio = patched.growth.seconds_per_iteration / unpatched.growth.seconds_per_iteration
same = len({row.extra[1] for row in rows.values()}) == 1
print(f"patched / unpatched time per call = {ratio:.3f}x; outputs bit-identical: {same}")
