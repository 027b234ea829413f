"""TF 97697's reproduction as posted: four traces of a ``tf.function`` using ``@tf.custom_gradient``.

Source: https://github.com/tensorflow/tensorflow/issues/97697
Reproduces: four registrations kept (each holding its trace's result): the mechanism, a few
hundred KiB at most.
Expected: no leak (custom_gradient_registry seen 4 times: a small-count finding)
Venv: .venv
"""
import gc

import tensorflow as tf


@tf.custom_gradient
def nonsense(x):
    def grad(upstream):
        return upstream * 0.1

    return x * 2, grad


def go(outer_val):
    @tf.function
    def compute(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = nonsense(x)
            dy_dx = tape.gradient(y, x)
        return y, dy_dx

    print(compute(outer_val))


for _ in range(4):
    go(tf.constant(2.0))
    gc.collect()
