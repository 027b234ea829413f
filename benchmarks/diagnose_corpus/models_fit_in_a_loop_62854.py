"""Small Keras models built and fit one after another, ``clear_session()`` after each: every
traced train step's custom-gradient registrations (and their graphs) kept.

Source: https://github.com/tensorflow/tensorflow/issues/62854 (memory grows with each model
trained in a loop, clear_session or not; tf-keras 286 / TF 61791 the same)
Reproduces: 12 models (Dense 64-64-1) fit for one epoch on 256 rows, ``clear_session()`` after
each (the patch's docstring: 2 registrations and ≈3.8 MB per small model on 2.21.0).
Expected: custom_gradient_registry
Venv: .venv
"""
import numpy as np
import keras

rng = np.random.default_rng(0)
x, y = rng.random((256, 20), dtype=np.float32), rng.random((256, 1), dtype=np.float32)
for step in range(12):
    model = keras.Sequential([keras.Input(shape=(20,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    model.fit(x, y, epochs=1, batch_size=32, verbose=0)
    keras.backend.clear_session()
print("done")
