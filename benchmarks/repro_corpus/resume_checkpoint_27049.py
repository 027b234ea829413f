"""A training script that resumes from the checkpoint it finds: the first run starts from scratch,
the second from the first one's weights, so its losses differ.

Source: https://github.com/tensorflow/tensorflow/issues/27049 ("Resuming training from saved
checkpoint produces different result than uninterrupted training"); https://github.com/keras-team/keras/issues/19179
(BackupAndRestore, resuming where a former run stopped)
Reproduces: a seeded model; weights loaded from model.weights.h5 when the file exists (as the
threads' restart code does), 2 epochs, the weights saved back; the losses printed.
Expected: not repeatable
First difference: stdout line 1
Cause: state_left_by_run
Confirmed: yes
Fixable: no
Venv: .venv
"""
import os

import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(0)
data = np.random.RandomState(0)
x = data.rand(128, 4).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="relu"),
                             tf.keras.layers.Dense(1)])
model.compile("sgd", "mse")
checkpoint = "model.weights.h5"
print("start", "resumed from " + checkpoint if os.path.exists(checkpoint) else "from scratch")
if os.path.exists(checkpoint):
    model.load_weights(checkpoint)
history = model.fit(x, y, epochs=2, batch_size=32, shuffle=False, verbose=0)
model.save_weights(checkpoint)
print("losses", [round(loss, 5) for loss in history.history["loss"]])
