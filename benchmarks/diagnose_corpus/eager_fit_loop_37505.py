"""``model.fit`` called again and again on the same model (eager fit loop): flat after warm-up.

Source: https://github.com/tensorflow/tensorflow/issues/37505 (memory leak in model.fit)
Reproduces: one small model, ``fit`` for one epoch on 256 rows, 60 times.
Expected: plateau
Venv: .venv
"""
import numpy as np
import keras

rng = np.random.default_rng(0)
x, y = rng.random((256, 20), dtype=np.float32), rng.random((256, 1), dtype=np.float32)
model = keras.Sequential([keras.Input(shape=(20,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
for step in range(60):
    model.fit(x, y, epochs=1, batch_size=32, verbose=0)
print("done")
