"""A program that fails the same way on every run (a shape mismatch raised in fit): its runs repeat,
exit status 1 each time, and that deserves an answer, not silence; repro's own exit status must
say "repeatable", not the program's 1.

Source: https://github.com/keras-team/keras/issues/19367 ("Input 0 of layer "dense_2" is incompatible
with the layer: expected axis -1 of input shape to have value 16384, but received input with shape
(None, 65536)")
Reproduces: a Dense model declared for 8 features fitted on 10, seeded; the ValueError ends it.
Expected: repeatable
Cause: none
Confirmed: no
Fixable: no
Venv: .venv
"""
import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(0)
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(1)])
model.compile("adam", "mse")
print("fitting")
model.fit(np.zeros((16, 10), "float32"), np.zeros((16, 1), "float32"), epochs=1, verbose=0)
print("done")
