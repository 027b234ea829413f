"""The same script, another thread count on every run: its launcher hands each job an
OMP_NUM_THREADS budget, the script sizes TensorFlow's pool and its batches from it (as Keras once
did, keras PR 12254), and the numbers change with it. The runs' fingerprints differ
(intra_op_threads, variables.OMP_NUM_THREADS); no seed is involved.

Source: https://github.com/keras-team/keras/pull/12254 ("keras uses os.environ.get('OMP_NUM_THREADS')
to set intra_op_parallelism_threads" ... "to achieve reproducible keras models");
https://github.com/tensorflow/community/pull/346 (determinism RFC: "Users must not change the thread
pool size between runs if they want deterministic behavior"); https://github.com/pytorch/pytorch/issues/2201
Reproduces: the launcher's budget stands in as 1 + (start second mod 16), so two runs started a few
seconds apart always get different budgets (a PID or load-based budget could repeat by chance);
OMP_NUM_THREADS set from it before TF starts, the pool and the batch size (8 per thread) follow,
the batch size and the first batches' means printed.
Expected: not repeatable
First difference: stdout line 1
Cause: environment
Confirmed: no
Fixable: no
Venv: .venv
"""
import os
import time

os.environ["OMP_NUM_THREADS"] = str(1 + int(time.time()) % 16)  # the launcher's budget for this job

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

threads = int(os.environ["OMP_NUM_THREADS"])
tf.config.threading.set_intra_op_parallelism_threads(threads)
values = np.linspace(0.0, 1.0, 1000, dtype="float32")
batches = tf.data.Dataset.from_tensor_slices(values).batch(8 * threads)
print("batch size", 8 * threads, "means", [round(float(tf.reduce_mean(batch)), 5) for batch in batches.take(3)])
