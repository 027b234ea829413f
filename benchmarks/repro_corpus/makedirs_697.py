"""The first run creates its export folder; every later run fails on it: `os.makedirs` without
`exist_ok` raises FileExistsError when the folder an earlier run left is there.

Source: https://github.com/tensorflow/tensorflow/pull/697 ("Check if logdir already exists before
trying to create it": write_graph "will fail the second time its run because it tries to create a
folder that now already exists"); https://github.com/metatensor/metatrain/issues/446
(FileExistsError from os.makedirs(checkpoint_dir))
Reproduces: a seeded model's weights written to export/ after os.makedirs("export"); the second run
exits with status 1.
Expected: not repeatable
First difference: exit status
Cause: state_left_by_run
Confirmed: yes
Fixable: no
Venv: .venv
"""
import os

import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(0)
layer = tf.keras.layers.Dense(2)
layer.build((None, 3))
os.makedirs("export")
np.save(os.path.join("export", "kernel.npy"), layer.kernel.numpy())
print("exported", [round(float(v), 6) for v in layer.kernel.numpy().ravel()])
