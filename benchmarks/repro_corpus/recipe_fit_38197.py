"""The documented recipe (keras.utils.set_random_seed + enable_op_determinism) on the CPU: runs
repeat, whatever Keras' progress bar prints about timings; but under the global seed Keras 3's
fit shuffles the arrays in the same order every epoch (its array adapter draws the permutation
with tf.random.shuffle in a Dataset.map, iterated anew each epoch; measured on Keras 3.15.1:
[0, 4, 1, 5, 7, 6, 2, 3] at all three iterations), which repro names as a warning.

Source: https://github.com/tensorflow/tensorflow/issues/38197 (two runs whose losses match while
the progress bar's "13s 14ms/step" differ); https://github.com/NVIDIA/framework-reproducibility
Reproduces: a small model fitted with the progress bar on (verbose=1), 3 epochs, then evaluated.
Expected: repeatable
Cause: none
Trap: dataset_epoch_repeat
Confirmed: no
Fixable: no
Venv: .venv
"""
import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(1)
tf.config.experimental.enable_op_determinism()
data = np.random.RandomState(0)
x = data.rand(512, 8).astype("float32")
y = (x.sum(axis=1) > 4).astype("float32")
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"),
                             tf.keras.layers.Dropout(0.2), tf.keras.layers.Dense(1, activation="sigmoid")])
model.compile("adam", "binary_crossentropy", metrics=["accuracy"])
model.fit(x, y, epochs=3, batch_size=32, verbose=1)
print("evaluate", model.evaluate(x, y, verbose=0))
