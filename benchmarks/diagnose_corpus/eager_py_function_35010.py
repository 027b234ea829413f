"""A Keras layer whose ``call`` uses ``tf.py_function``, called eagerly in a loop.

Source: https://github.com/tensorflow/tensorflow/issues/35010
Reproduces: the thread's ``TestLayer`` (a ``tf.py_function`` in ``call``) on a (1, 8) input,
1,000 calls (≈40 KiB per call on 2.21: ≈39 MiB).
Expected: eager_py_function
Venv: .venv
"""
import numpy as np
import tensorflow as tf


class TestLayer(tf.keras.layers.Layer):
    def __init__(self, output_dim, **kwargs):
        super().__init__(**kwargs)
        self.output_dim = output_dim

    def build(self, input_shape):
        self.built = True

    def call(self, inputs):
        return tf.py_function(lambda x: x * 2, [inputs], tf.float32)


layer = TestLayer(8)
data = tf.constant(np.ones((1, 8), dtype=np.float32))
for step in range(1000):
    layer(data)
print("done")
