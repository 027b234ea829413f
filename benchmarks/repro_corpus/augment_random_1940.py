"""NumPy and TF seeded, and still another augmentation on every run: the augmentation draws its
parameters from Python's `random`, which nothing seeded.

Source: https://github.com/keras-team/keras/issues/1940 ("Reproducibility with ImageDataGenerator":
"I could not reproduce the same results even when I defined a np.seed() ... it uses python random
instead of numpy random"); also https://github.com/keras-team/keras/pull/1968
Reproduces: np.random.seed(0) and tf.random.set_seed(0), images from NumPy, a random shift and
brightness per image from random.uniform (as the thread's random_rotation did), the result printed.
Expected: not repeatable
First difference: stdout line 1
Cause: python_random_unseeded
Confirmed: yes
Fixable: yes
Venv: .venv
"""
import random

import numpy as np
import tensorflow as tf

np.random.seed(0)
tf.random.set_seed(0)
images = tf.constant(np.random.rand(4, 8, 8, 1).astype("float32"))
shifts = [random.uniform(-0.2, 0.2) for _ in range(4)]
augmented = tf.image.adjust_brightness(images, delta=shifts[0]) * (1.0 + shifts[1])
print("augmented mean", round(float(tf.reduce_mean(augmented)), 6))
