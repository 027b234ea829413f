"""TF 57690's folds, many of them, each generator capturing a scalar as in the thread: the leak
fires on every fold but keeps almost nothing.

Source: https://github.com/tensorflow/tensorflow/issues/57690
Reproduces: the posted ``build_dataset`` / ``train_for_a_fold``, 150 folds; the fix frees 150
small objects (well under 1 MiB), while the folds' own datasets and iterators grow the process.
Expected: from_generator_release (named, but explaining < 8 MiB: the fix removes almost nothing)
Venv: .venv
"""
import tensorflow as tf


class SomeObj:
    def __init__(self, x):
        self.x = x


def build_dataset(obj):
    def _generator():
        while True:
            yield tf.convert_to_tensor(obj.x, dtype=tf.float32)

    return tf.data.Dataset.from_generator(_generator, output_signature=tf.TensorSpec(shape=(), dtype=tf.float32))


def train_for_a_fold(fold):
    dataset = build_dataset(SomeObj(fold))
    for value in dataset.take(5):
        pass


for fold in range(150):
    train_for_a_fold(fold)
print("done")
