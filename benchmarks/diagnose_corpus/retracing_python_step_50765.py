"""A custom training loop whose ``tf.function`` step takes the step number as a Python int.

Source: https://github.com/tensorflow/tensorflow/issues/50765 (memory leak in custom training loop
+ tf.function; the same pattern in TF 31842, 38002: a Python value per call retraces)
Reproduces: a small Dense model trained with ``GradientTape`` for 300 steps, ``train_step(x, y,
step)`` with ``step`` a Python int (a warm-up schedule inside): a new graph per step.
Expected: retracing (no patch: pass ``tf.constant(step)``; nothing to verify)
Venv: .venv
"""
import numpy as np
import tensorflow as tf

model = tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dense(32, activation="relu"),
                             tf.keras.layers.Dense(1)])
optimizer = tf.keras.optimizers.SGD(0.01)
rng = np.random.default_rng(0)
x = tf.constant(rng.random((32, 16), dtype=np.float32))
y = tf.constant(rng.random((32, 1), dtype=np.float32))


@tf.function
def train_step(x, y, step):
    scale = min(1.0, (step + 1) / 100)  # a Python warm-up: a constant of each traced graph
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y)) * scale
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss


for step in range(300):
    train_step(x, y, step)
print("done")
