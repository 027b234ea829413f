"""TF 97697's ``go()`` in a loop as posted (a scalar input, nothing else in the graph): each kept
registration holds a small traced graph.

Source: https://github.com/tensorflow/tensorflow/issues/97697
Reproduces: 150 calls of the thread's ``go()``; ≈70 KiB kept per trace (measured with
``--verify``: ≈10 MiB removed), between the goals' bounds.
Expected: custom_gradient_registry
Venv: .venv
"""
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

    return compute(outer_val)


for step in range(150):
    go(tf.constant(2.0))
print("done")
