"""A Keras model trained twice gives other losses each time: no seed anywhere.

Source: https://github.com/keras-team/keras/issues/2743 ("Each time I run the Keras, I get
different result"); also https://github.com/tensorflow/tensorflow/issues/25212
Reproduces: the threads' small dense model on fixed data (NumPy's RandomState(0), so only the
weights' initialization and the shuffling vary), no seed set; 2 epochs, the losses printed.
Expected: not repeatable
First difference: stdout line 2
Cause: tf_seed_unset
Confirmed: yes
Fixable: yes
Venv: .venv
"""
import numpy as np
import tensorflow as tf

data = np.random.RandomState(0)
x = data.rand(512, 8).astype("float32")
y = (x.sum(axis=1) > 4).astype("float32")
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"),
                             tf.keras.layers.Dense(1, activation="sigmoid")])
model.compile("adam", "binary_crossentropy")
history = model.fit(x, y, epochs=2, batch_size=64, verbose=2)
print("losses", [round(loss, 6) for loss in history.history["loss"]])
