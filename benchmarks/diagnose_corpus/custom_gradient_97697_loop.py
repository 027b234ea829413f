"""``@tf.custom_gradient`` inside a ``tf.function`` traced again and again: each trace's
registration (and the graph it holds) kept in TF's gradient registry.

Source: https://github.com/tensorflow/tensorflow/issues/97697
Reproduces: the thread's ``go()`` (a new ``tf.function`` per call, a tape and a custom-gradient
op inside), 150 calls; each trace adds a 256 KiB constant to the input, so that each kept graph
holds one (≈70 KiB per trace without it: too little to measure in 30 s).
Expected: custom_gradient_registry
Venv: .venv
"""
import numpy as np
import tensorflow as tf

OFFSET = np.ones(65_536, dtype=np.float32)  # 256 KiB, a constant in each traced graph

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
            y = nonsense(x + tf.constant(OFFSET))
        return y, tape.gradient(y, x)

    return compute(outer_val)


for step in range(150):
    go(tf.fill([65_536], float(step)))
print("done")
