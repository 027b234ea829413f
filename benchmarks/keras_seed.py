"""keras_seed: what its check costs. The default seeds are read when a layer or initializer is made
(Keras 3) or built (tf_keras, Keras 2), never per step: a training step of a Dense + Dropout
model, and a Dense layer made and built, timed under stock (nothing applied), "warn" (the
default) and "follow", after tf.random.set_seed(1) alone (where the check fires). Fresh processes,
the three modes alternating, best time of each process, best process of each mode.

    PYTHONPATH=. python benchmarks/keras_seed.py [rounds] [steps] [--smoke]
    TF_USE_LEGACY_KERAS=1 PYTHONPATH=. python benchmarks/keras_seed.py     # tf_keras
"""

from __future__ import annotations

from _fresh import run, sized

ROUNDS = sized(3, 1, 0)
STEPS = sized(300, 5, 1)
LAYERS = sized(200, 5)
CODE = """
import json, time, warnings
import tf_patches
mode = {mode!r}
if mode != "stock":
    tf_patches.apply_all(keras_seed=mode)
warnings.simplefilter("ignore")
import numpy as np
import tensorflow as tf
keras = tf.keras
tf.random.set_seed(1)

model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dropout(0.5), keras.layers.Dense(1)])
model.compile("sgd", "mse")
x, y = np.ones((64, 32), "float32"), np.ones((64, 1), "float32")
model.train_on_batch(x, y)  # traced
step = float("inf")
for _ in range({steps}):
    start = time.perf_counter()
    model.train_on_batch(x, y)
    step = min(step, time.perf_counter() - start)
layer = float("inf")
for _ in range({layers}):
    start = time.perf_counter()
    keras.layers.Dense(8).build((None, 4))
    layer = min(layer, time.perf_counter() - start)
print(json.dumps({{"step": step, "layer": layer}}))
"""

MODES = ("stock", "warn", "follow")
best = {mode: {"step": float("inf"), "layer": float("inf")} for mode in MODES}
for _ in range(ROUNDS):
    for mode in MODES:  # alternating: the load of the machine falls on every mode alike
        result = run(CODE.format(mode=mode, steps=STEPS, layers=LAYERS))
        for key in ("step", "layer"):
            best[mode][key] = min(best[mode][key], result[key])
print(f"train_on_batch (Dense 64 + Dropout, batch 64) best of {STEPS} steps; Dense(8) made and built, best "
      f"of {LAYERS}; best of {ROUNDS} fresh processes per mode")
print(f"{'':8}{'µs/step':>10}{'x stock':>9}{'µs/layer':>11}{'x stock':>9}")
for mode in MODES:
    step, layer = best[mode]["step"], best[mode]["layer"]
    print(f"{mode:8}{step * 1e6:>10.0f}{step / best['stock']['step']:>9.3f}"
          f"{layer * 1e6:>11.0f}{layer / best['stock']['layer']:>9.3f}")
