"""A ``tf.function`` called in a loop with the same tensor: traced once, no retracing, flat.

Source: https://github.com/tensorflow/tensorflow/issues/57982 (RAM leak when using tf.function on
TF 2.8–2.10; the same program in TF 50765's thread). The issue says it is neither Python values nor
new shapes; on TF 2.21 the loop is flat.
Reproduces: the thread's ``operate(img)`` on one (6, 6, 7) tensor, 60,000 calls.
Expected: plateau (retracing must not fire: one trace)
Venv: .venv
"""
import tensorflow as tf


@tf.function
def operate(img):
    return img


img = tf.zeros((6, 6, 7))
for i in range(60_000):
    operate(img)
print("done")
