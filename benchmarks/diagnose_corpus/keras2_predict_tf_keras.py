"""TF 58676's ``predict`` loop on tf-keras 2.21 (``TF_USE_LEGACY_KERAS=1``): the same Keras 2
data adapter, the leak much shrunk.

Source: https://github.com/tensorflow/tensorflow/issues/58676 (the model and loop of TF 33009, as
in keras2_predict_58676.py)
Reproduces: 250 ``predict`` calls on one (8, 10) array through tf_keras; its steady state grows
≈1 MiB per 1,000 calls (docs/findings/keras_predict_loops.md): a pipeline built per call, little
memory kept by each.
Expected: keras2_predict_loop (named; measured with --verify the fix removed ≈12 MiB, set-up
included: between the goals' bounds)
Venv: .venv
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before TensorFlow is imported: tf.keras is tf_keras

import numpy as np
import tensorflow as tf

inputs = tf.keras.Input(shape=(10,))
outputs = tf.keras.layers.Dense(2)(tf.keras.layers.Dense(32)(inputs))
model = tf.keras.Model(inputs=inputs, outputs=outputs)
model.compile(optimizer="adam", loss="mse")
data = np.random.default_rng(0).random((8, 10), dtype=np.float32)
for step in range(250):
    model.predict(data, verbose=0)
print("done", type(model).__module__)
