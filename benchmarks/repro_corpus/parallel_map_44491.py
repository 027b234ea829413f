"""A `Dataset.map(..., num_parallel_calls>1, deterministic=True)` drawing `tf.random.uniform` under
a global seed gives other values on every run.

Source: https://github.com/tensorflow/tensorflow/issues/44491 ("deterministic `Dataset.map`s
aren't"); also TF 13932, 34909, and https://github.com/NVIDIA/framework-reproducibility/issues/36
Reproduces: the posted map function, over 64 elements with 4 parallel calls (the thread's 10 with
2 can come out alike by chance), values printed.
Expected: not repeatable
First difference: stdout line 1
Cause: parallel_random_map
Confirmed: yes
Fixable: yes
Venv: .venv
"""
import tensorflow as tf

tf.random.set_seed(0)


def map_fn(x):
    return tf.cast(x, tf.float32) + tf.random.uniform(())


ds = tf.data.Dataset.range(64).map(map_fn, num_parallel_calls=4, deterministic=True)
print("values", [round(float(value), 5) for value in ds])
