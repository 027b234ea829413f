"""Samples loaded by a pool of Python threads arrive in the order the threads finish: another
order, so other batches, on every run. No seed, hash or tf.data option is involved: none of the
knobs repro turns makes these runs repeat.

Source: https://github.com/tensorflow/tensorflow/issues/9441 ("Non deterministic behaviour of
tf.train.batch in case the number of threads is higher than 1": batches "are not in every run the
same"; reducing the pre-fetch threads to 1 fixes it); https://github.com/keras-team/keras/pull/1968
("This fix does not work in case of multi-threading. There is a race condition")
Reproduces: 16 samples decoded by 4 threads (concurrent.futures), collected with as_completed; each
decode does a little work whose duration varies (a sleep of the clock's microsecond count mod 7,
in ms, as I/O would); the arrival order and the first batch's mean printed.
Expected: not repeatable
First difference: stdout line 1
Cause: unknown
Confirmed: no
Fixable: no
Venv: .venv
"""
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

import tensorflow as tf


def decode(index):
    time.sleep((time.perf_counter_ns() // 1000 % 7) / 1000.0)  # I/O-like: its duration varies
    return index, tf.fill([4], float(index))


with ThreadPoolExecutor(max_workers=4) as pool:
    arrived = [future.result() for future in as_completed([pool.submit(decode, i) for i in range(16)])]
print("arrival order", [index for index, _ in arrived])
print("first batch mean", float(tf.reduce_mean(tf.stack([sample for _, sample in arrived[:4]]))))
