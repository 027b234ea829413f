"""(a) A TF random op without a seed, inside a ``tf.function`` among deterministic ops: each run
draws other numbers there.

Case: a
Located: RandomStandardNormal
Line: the line marked "located here" (the draw, in the function's first call; not the ops before it)
"""
import tensorflow as tf

x = tf.constant([1.0, 2.0, 3.0, 4.0]) * 3.0


@tf.function
def step(v):
    a = v * 2.0 + 1.0
    noise = tf.random.normal([4])  # located here
    return tf.reduce_sum(a * noise)


for i in range(3):
    total = step(x)
print("total", float(total))
