"""``tf.image.random_contrast`` in an eager augmentation loop under a global seed.

Source: https://github.com/tensorflow/tensorflow/issues/37252 (any random sampling under a set
seed grows memory in eager mode; the same kernel cache as TF 36164)
Reproduces: 1,200 contrast jitters of one 32x32x3 image, ``.numpy()`` each (≈35 KiB per call on
2.21: ≈42 MiB).
Expected: seed_kernel_cache
Venv: .venv
"""
import numpy as np
import tensorflow as tf

tf.random.set_seed(7)
image = tf.constant(np.random.default_rng(0).random((32, 32, 3), dtype=np.float32))
total = 0.0
for step in range(1200):
    total += float(tf.image.random_contrast(image, 0.5, 1.5).numpy().mean())
print("mean", total / 1200)
