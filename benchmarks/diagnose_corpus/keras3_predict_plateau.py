"""Keras 3 ``model.predict`` in a loop: grows while tracing and warming up, then flat.

Source: https://github.com/keras-team/keras/issues/13118 (repeatedly calling model.predict
results in memory leak); on Keras 3 the growth stops (docs/measurements.md: +16 to +19 MiB
from 1,000 to 3,000 calls).
Reproduces: a Dense(32)-Dense(2) model, ``predict`` on one (8, 10) array 200 times.
Expected: keras3_predict_loop (named for the set-up: a tf.data pipeline per predict call, ≈17 KiB
each over the first calls, then flat; the verdict stays "no leak", and the fix removes the rise)
Venv: .venv
"""
import numpy as np
import keras

model = keras.Sequential([keras.Input(shape=(10,)), keras.layers.Dense(32), keras.layers.Dense(2)])
model.compile(optimizer="adam", loss="mse")
data = np.random.default_rng(0).random((8, 10), dtype=np.float32)
for step in range(200):
    model.predict(data, verbose=0)
print("done")
