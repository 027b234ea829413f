"""A shuffled dataset built before `tf.random.set_seed` gives another order on every run: the
shuffle took its seed when it was built, when no global seed was set yet.

Source: https://github.com/tensorflow/tensorflow/issues/26179 ("Datasets not reshuffling between
epochs in eager mode": `Dataset.range(5).shuffle(5)` then `tf.set_random_seed(0)`, and "even though
the same random seed is used in both runs, the order of elements differs between them"); also
https://github.com/tensorflow/tensorflow/issues/9003 (an op built before the graph seed)
Reproduces: the thread's dataset (10 elements), built one line above tf.random.set_seed(0), two epochs.
Expected: not repeatable
First difference: stdout line 1
Cause: seeded_too_late
Confirmed: yes
Fixable: yes
Venv: .venv
"""
import tensorflow as tf

dataset = tf.data.Dataset.range(10).shuffle(10)
tf.random.set_seed(0)
print("epoch 1", [int(x) for x in dataset])
print("epoch 2", [int(x) for x in dataset])
