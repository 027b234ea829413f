"""A seed taken from the clock, printed as the run starts: a new seed, so new numbers, on every run.

Source: https://github.com/keras-team/keras/pull/7239 ("I can use a seed like the current timestamp
to feed to random_transform"); https://github.com/DUNE/larnd-sim/pull/63 ("Setting random seed as
time and print it")
Reproduces: seed = int(time.time()) given to tf.random.set_seed and printed (line 1: a time, which
a comparison should mask), then an augmentation-like draw printed (line 2).
Expected: not repeatable
First difference: stdout line 2
Cause: seed_varies
Confirmed: yes
Fixable: no
Venv: .venv
"""
import time

import tensorflow as tf

seed = int(time.time())
print("seed", seed)
tf.random.set_seed(seed)
print("jitter", [round(float(v), 5) for v in tf.random.uniform([4], -0.1, 0.1)])
