"""A seeded run saves its metrics with the time they were written: the saved files differ on every
run while the numbers themselves repeat (the difference is the clock, which no seed fixes).

Source: https://github.com/keras-team/keras/issues/15143 ("Add track_times=False to
Model.save_weights('.h5')": "even when the weights are exactly the same, the resulting saved files
will not be the same", because a write time is stored in the file)
Reproduces: a seeded Dense layer scored on fixed data; [score, time.time()] saved to metrics.npy, a
file compared with --compare (stdout repeats).
Expected: not repeatable
First difference: metrics.npy
Cause: clock_in_output
Confirmed: no
Fixable: no
Args: --compare metrics.npy
Venv: .venv
"""
import time

import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(0)
features = np.linspace(0.0, 1.0, 32, dtype="float32").reshape(16, 2)
score = float(tf.reduce_mean(tf.keras.layers.Dense(1)(features)))
np.save("metrics.npy", np.array([score, time.time()]))
print("score", round(score, 6), "saved to metrics.npy")
