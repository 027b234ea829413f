"""Eager random ops under a global seed: one new stateful kernel kept per draw.

Source: https://github.com/tensorflow/tensorflow/issues/36164
Reproduces: the thread's loop (a tensor converted to NumPy, then a random op on it, a global seed
set, no op seed), 1,500 draws: ≈35 KiB each on 2.21, ≈52 MiB in all.
Expected: seed_kernel_cache
Venv: .venv
"""
import numpy as np
import tensorflow as tf

tf.random.set_seed(1234)
image = tf.constant(np.zeros((8, 8, 3), dtype=np.float32))
for step in range(1500):
    image = tf.image.random_flip_left_right(tf.constant(image.numpy()))
print("done", image.shape)
