"""A ``tf.custom_gradient`` op in each of many ``tf.Graph``s: the registry keeps every graph alive.

Source: https://github.com/tensorflow/tensorflow/issues/27492 (use of tf.custom_gradient prevents
garbage collection of Graph)
Reproduces: 45 graphs built in turn (graph mode through ``tf.compat.v1``), each with a 1 MiB
constant and a custom-gradient op on it (≈45 MiB of graphs kept).
Expected: custom_gradient_registry
Venv: .venv
"""
import gc

import numpy as np
import tensorflow as tf


@tf.custom_gradient
def op(x):
    def grad(dy):
        return dy

    return tf.identity(x), grad


for step in range(45):
    with tf.Graph().as_default():
        x = tf.constant(np.full(262_144, step, dtype=np.float32))  # 1 MiB in the graph
        y = op(x)
    gc.collect()
print("done")
