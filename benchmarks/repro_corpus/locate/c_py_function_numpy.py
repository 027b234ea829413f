"""(c) A ``py_function`` drawing from an unseeded NumPy generator, its output fed to TF ops: TF's
own ops are deterministic, the Python function is not.

Case: c
Located: EagerPyFunc
Line: the line marked "located here" (the py_function op, which runs the Python function)
"""
import numpy as np
import tensorflow as tf

rng = np.random.default_rng()


@tf.function
def step(v):
    drawn = tf.py_function(lambda: rng.standard_normal(3).astype("float32"), [], tf.float32)  # located here
    return tf.reduce_sum(v * drawn)


print("value", float(step(tf.ones([3]))))
