"""A custom training loop whose ``tf.function`` step takes the step number as a Python int.

Source: https://github.com/tensorflow/tensorflow/issues/50765 (memory leak in custom training loop
+ tf.function; the same pattern in TF 31842, 38002: a Python value per call retraces)
Reproduces: a two-layer network of plain variables trained with ``GradientTape`` for 300 steps,
``train_step(x, y, step)`` with ``step`` a Python int (a warm-up schedule inside): a new graph per
step. Plain variables, not Keras layers: a Keras 3 model's traces also register custom gradients,
which custom_gradient_registry would count inside the same graphs (the retraces keep them).
Expected: retracing (no patch: pass ``tf.constant(step)``; nothing to verify)
Venv: .venv
"""
import numpy as np
import tensorflow as tf

rng = np.random.default_rng(0)
x = tf.constant(rng.random((32, 16), dtype=np.float32))
y = tf.constant(rng.random((32, 1), dtype=np.float32))
w1 = tf.Variable(rng.normal(0, 0.1, (16, 32)).astype(np.float32))
w2 = tf.Variable(rng.normal(0, 0.1, (32, 1)).astype(np.float32))


@tf.function
def train_step(x, y, step):
    rate = 0.01 * min(1.0, (step + 1) / 100)  # a Python warm-up: a constant of each traced graph
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.nn.relu(x @ w1) @ w2 - y))
    for variable, gradient in zip((w1, w2), tape.gradient(loss, (w1, w2))):
        variable.assign_sub(rate * gradient)
    return loss


for step in range(300):
    train_step(x, y, step)
print("done")
