"""A seeded program that reads its input from standard input (`python prog.py < data.txt`): its
runs repeat when each gets the same input. Given no input it stops with exit status 3, so a run
that silently got an empty stdin shows.

Source: https://github.com/tensorflow/models/issues/679 ("SyntaxNet: where does parser_eval.py
receive stdin?": a TF program fed by `echo "sentence" |` and reading with input())
Reproduces: rows "x,y" read from stdin (the harness feeds data.txt, 64 rows), a seeded Dense layer
fitted by 20 gradient steps, its weights printed.
Expected: repeatable
Cause: none
Confirmed: no
Fixable: no
Stdin: data.txt
Venv: .venv
"""
import sys

import numpy as np
import tensorflow as tf

rows = [line.split(",") for line in sys.stdin.read().splitlines() if line.strip()]
if not rows:
    print("no input on stdin", file=sys.stderr)
    sys.exit(3)
data = np.array(rows, dtype="float32")
print("rows", len(data))
tf.keras.utils.set_random_seed(0)
layer = tf.keras.layers.Dense(1)
optimizer = tf.keras.optimizers.SGD(0.1)
for _ in range(20):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((layer(data[:, :1]) - data[:, 1:]) ** 2)
    optimizer.apply_gradients(zip(tape.gradient(loss, layer.trainable_variables), layer.trainable_variables))
print("weights", [round(float(v), 5) for v in tf.concat([tf.reshape(w, [-1]) for w in layer.weights], 0)])
