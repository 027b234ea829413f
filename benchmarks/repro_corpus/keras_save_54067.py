"""A seeded model saved as `.keras` on every run: the weights and the architecture repeat, but the
archive never matches byte for byte: config.json holds Keras' per-process `shared_object_id`s and
metadata.json the save time (`date_saved`). Compared by weights and by config without those ids,
the runs repeat (measured: model.weights.h5 identical, 14 arrays; config equal once the ids go).

Source: https://github.com/tensorflow/tensorflow/issues/54067 ("Cannot reproducibly save a model to
disk"); https://github.com/keras-team/keras/issues/15948 (the same, moved to Keras)
Reproduces: keras.utils.set_random_seed(0) and op determinism, a small model compiled and fitted one
epoch, saved to model.keras, compared with --compare.
Expected: repeatable
Cause: none
Confirmed: no
Fixable: no
Args: --compare model.keras
Venv: .venv
"""
import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(0)
tf.config.experimental.enable_op_determinism()
data = np.random.RandomState(0)
x = data.rand(64, 4).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="relu"),
                             tf.keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(x, y, epochs=1, batch_size=16, verbose=0)
model.save("model.keras")
print("saved model.keras")
