"""A ResNet50 forward-pass loop (``weights=None``): growth that is set-up, then a creep.

Source: https://github.com/tensorflow/tensorflow/issues/60131 (memory leak in forward pass of
ResNet50 with TF 2.12 and Python 3.11: the py311 advisory's creep)
Reproduces: 30 forward passes of one 224x224 image after building the model; the thread's own
prints show ≈40 KB per pass after warm-up.
Expected: plateau
Venv: .venv
"""
import numpy as np
import tensorflow as tf

model = tf.keras.applications.ResNet50(weights=None)
image = tf.constant(np.random.default_rng(0).random((1, 224, 224, 3), dtype=np.float32))
for step in range(30):
    model(image, training=False)
print("done")
