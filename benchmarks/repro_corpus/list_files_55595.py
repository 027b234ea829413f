"""`Dataset.list_files` shuffles the file names by default, with no seed: another file order on
every run (here in a fresh temporary folder, so the paths differ too).

Source: https://github.com/tensorflow/tensorflow/issues/55595 ("Possible shuffling issue with using
tf.data.Dataset.list_files?"; "the fix afterwards was to turn off the shuffle");
https://github.com/tensorflow/models/pull/5098 (file order and list_files' shuffle)
Reproduces: 8 CSV shards written to tempfile.mkdtemp(), read through list_files(pattern) with its
default shuffle; the files' full paths printed in the order read.
Expected: not repeatable
First difference: stdout line 1
Cause: list_files_shuffle
Confirmed: yes
Fixable: yes
Venv: .venv
"""
import os
import shutil
import tempfile

import tensorflow as tf

folder = tempfile.mkdtemp(prefix="shards-")
try:
    for index in range(8):
        with open(os.path.join(folder, f"part-{index}.csv"), "w") as handle:
            handle.write(f"{index},{index * index}\n")
    files = tf.data.Dataset.list_files(os.path.join(folder, "part-*.csv"))
    print("read order", [path.decode() for path in files.as_numpy_iterator()])
finally:
    shutil.rmtree(folder)
