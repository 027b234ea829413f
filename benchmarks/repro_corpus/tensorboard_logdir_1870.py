"""A seeded, repeatable training run that prints its TensorBoard log folder, named after the time
it started (`%Y%m%d-%H%M%S`, the TensorBoard guide's pattern): the folder name differs between
runs, the results do not. A comparison must read that name as a time, not as a difference.

Source: https://github.com/tensorflow/tensorboard/pull/1870 (the TensorBoard quickstart notebook's
time-stamped log_dir); https://github.com/arjuninv/AnyoneAI/issues/4 (log_dir="logs/fit/" +
datetime.datetime.now().strftime("%Y%m%d-%H%M%S") with the TensorBoard callback)
Reproduces: keras.utils.set_random_seed(1), a small model fitted 2 epochs logging into that folder
(a CSVLogger there: the TensorBoard callback needs the tensorboard package, not in this venv), the
folder and the losses printed.
Expected: repeatable
Cause: none
Confirmed: no
Fixable: no
Venv: .venv
"""
import datetime
import os

import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(1)
log_dir = "logs/fit/" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
data = np.random.RandomState(0)
x = data.rand(64, 4).astype("float32")
y = (x.sum(axis=1) > 2).astype("float32")
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="relu"),
                             tf.keras.layers.Dense(1, activation="sigmoid")])
model.compile("adam", "binary_crossentropy")
os.makedirs(log_dir, exist_ok=True)
history = model.fit(x, y, epochs=2, batch_size=16, verbose=0,
                    callbacks=[tf.keras.callbacks.CSVLogger(os.path.join(log_dir, "training.csv"))])
print("log_dir", log_dir)
print("losses", [round(loss, 6) for loss in history.history["loss"]])
