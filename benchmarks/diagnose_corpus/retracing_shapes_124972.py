"""A ``tf.function`` fed token batches of a new length each call: a graph traced and kept per shape.

Source: https://github.com/tensorflow/tensorflow/issues/124972 (``@tf.function`` re-tracing causes
unbounded memory growth, TF 2.21: variable-length NLP inputs)
Reproduces: an embedding-and-pool function over (4, n) token batches, n = 1 … 300, the function
kept alive (docs/measurements.md: 165 KiB per trace on TF 2.21, 206–212 KiB on 2.12/2.14).
Expected: retracing (no patch: the report gives the fix in code, nothing to verify)
Venv: .venv
"""
import numpy as np
import tensorflow as tf

table = tf.Variable(tf.random.normal([1000, 32]))


@tf.function
def encode(tokens):
    vectors = tf.nn.embedding_lookup(table, tokens)
    return tf.reduce_mean(tf.tanh(vectors), axis=1)


rng = np.random.default_rng(0)
for length in range(1, 301):
    encode(tf.constant(rng.integers(0, 1000, (4, length))))
print("done")
