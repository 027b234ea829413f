"""Many small Keras models built in one process, without ``clear_session``: growth that is not a
known leak (``gc.collect()`` after each model cuts most of it).

Source: https://github.com/tensorflow/tensorflow/issues/30324
Reproduces: 60 ``Sequential`` models built, compiled and called once (docs/measurements.md: 100
of them grow +662 MiB; with ``gc.collect()`` after each, +122 MiB; another allocator: no change).
Expected: no leak (no known signature; growth from models kept until a collection)
Venv: .venv
"""
import numpy as np
import keras

data = np.random.default_rng(0).random((4, 32), dtype=np.float32)
for step in range(60):
    model = keras.Sequential([keras.Input(shape=(32,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(128, activation="relu"), keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss="mse")
    model.predict(data, verbose=0)
print("done")
