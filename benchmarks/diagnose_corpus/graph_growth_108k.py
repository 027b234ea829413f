"""A ``Session.run`` loop that adds an op with a 108 KB constant to the graph on every run.

Source: https://github.com/tensorflow/tensorflow/issues/9646 (memory keeps growing when an op is
built inside the run loop: ``session.run(-var)``); the fix the thread gives is
``Graph.finalize()`` before the loop.
Reproduces: 300 runs, each adding ``x + tf.constant(<27,000 float32>)`` (≈108 KB of constant per
op, ≈32 MiB of graph at the least).
Expected: graph_growth_guard (finalize mode stops the loop at its first new op: the fix run exits 1)
Venv: .venv
"""
import numpy as np
import tensorflow as tf

tf.compat.v1.disable_eager_execution()
x = tf.compat.v1.placeholder(tf.float32, shape=[27_000])
feed = np.zeros(27_000, dtype=np.float32)
with tf.compat.v1.Session() as sess:
    for step in range(300):
        offset = tf.constant(np.full(27_000, step, dtype=np.float32))  # 108 KB, a new op each run
        sess.run(x + offset, feed_dict={x: feed})
print("done")
