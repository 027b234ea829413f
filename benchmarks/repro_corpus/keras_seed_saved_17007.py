"""`tf.random.set_seed(1)` alone, Keras' default seeds unseeded (the keras_seed trap springs on every
run), but the program prints nothing that shows it: it saves its weights and prints a line that
repeats. The verdict from standard output is "repeatable"; the trap must still be reported, as a
warning that suggests comparing what the program saves.

Source: https://github.com/keras-team/keras/issues/17007 (tf.random.set_seed alone and other Dense
weights on every run); https://github.com/keras-team/keras/issues/18244
Reproduces: a Dense layer built after tf.random.set_seed(1) alone; its kernel saved to kernel.npy
(not compared), only "saved" printed.
Expected: repeatable
Cause: none
Trap: keras_seed
Confirmed: no
Fixable: no
Venv: .venv
"""
import numpy as np
import tensorflow as tf

tf.random.set_seed(1)
layer = tf.keras.layers.Dense(4)
layer.build((None, 3))
np.save("kernel.npy", layer.kernel.numpy())
print("saved kernel.npy", layer.kernel.shape)
