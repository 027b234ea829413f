"""`tf.random.set_seed` set, and still another validation split on every run: the split is drawn
from NumPy's global RandomState, which nothing seeded.

Source: https://github.com/keras-team/keras/issues/9808 ("keras uses the numpy seed to do quite some
things ... shuffling the dataset"); https://github.com/maxhodak/keras-molecules/pull/51 ("Random
seed for numpy and random seed for random" are two different things)
Reproduces: data prepared first (np.random.permutation for a 80/20 split, before TensorFlow is
imported, as a data-preparation section does), then a seeded TF model scores the validation rows.
Expected: not repeatable
First difference: stdout line 1
Cause: numpy_unseeded
Confirmed: yes
Fixable: no
Venv: .venv
"""
import numpy as np

features = np.linspace(0.0, 1.0, 50, dtype="float32").reshape(50, 1)
order = np.random.permutation(len(features))
validation = np.sort(order[:10])

import tensorflow as tf  # noqa: E402  (the model section)

tf.random.set_seed(42)
print("validation rows", validation.tolist())
dense = tf.keras.layers.Dense(1, kernel_initializer=tf.keras.initializers.GlorotUniform(seed=1))
print("validation score", round(float(tf.reduce_mean(dense(features[validation]))), 6))
