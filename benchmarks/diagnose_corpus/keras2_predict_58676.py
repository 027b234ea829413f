"""Keras 2 ``model.predict`` on in-memory data, in a loop: a new input pipeline kept per call.

Source: https://github.com/tensorflow/tensorflow/issues/58676 (higher memory with model.predict
since TF 2.10; the model and loop of TF 33009, which the thread links)
Reproduces: a Dense(32)-Dense(2) model, ``predict`` on one (1, 10) array 200 times (≈248 KiB
per call on 2.12.1: ≈48 MiB).
Expected: keras2_predict_loop
Venv: .venv-oldest
"""
import numpy as np
from tensorflow.keras import Input, Model
from tensorflow.keras.layers import Dense

inputs = Input(shape=(10,))
outputs = Dense(2)(Dense(32)(inputs))
model = Model(inputs=inputs, outputs=outputs)
model.compile(optimizer="adam", loss="mse")
fake_data = np.random.uniform(low=0, high=1.0, size=(1, 10))
for step in range(200):
    model.predict(fake_data, verbose=0)
print("done")
