"""`interleave(..., deterministic=False)` yields elements in the order their work finishes, which
thread timing decides: another order on every run.

Source: https://github.com/EleutherAI/gpt-neo/pull/63 ("make dataset shuffling and interleaving
deterministic"); https://github.com/tensorflow/tensorflow/pull/45495 (the docs: "If set to False,
the transformation is allowed to yield elements out of order")
Reproduces: 24 "files" read by an interleave with 4 parallel calls and deterministic=False; each
read does a little work whose duration varies from run to run (a sleep of the clock's microsecond
count mod 7, in ms, as I/O would), the order printed.
Expected: not repeatable
First difference: stdout line 1
Cause: tfdata_nondeterministic
Confirmed: yes
Fixable: yes
Venv: .venv
"""
import time

import tensorflow as tf


def read(x):
    time.sleep((time.perf_counter_ns() // 1000 % 7) / 1000.0)  # I/O-like: its duration varies
    return x


def read_file(index):
    return tf.data.Dataset.from_tensors(index).map(lambda x: tf.py_function(read, [x], tf.int64))


dataset = tf.data.Dataset.range(24).interleave(read_file, cycle_length=4, num_parallel_calls=4,
                                               deterministic=False)
print("order", [int(x) for x in dataset])
