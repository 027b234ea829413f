"""TF 57690's reproduction as posted: three folds, each generator capturing a scalar.

Source: https://github.com/tensorflow/tensorflow/issues/57690
Reproduces: ``__del__ called!`` never printed for 3 folds: the leak's mechanism, with almost no
memory behind it (the fix frees three scalars).
Expected: no leak (from_generator_release seen 3 times: a small-count finding, nothing to remove)
Venv: .venv
"""
import tensorflow as tf


class SomeObj:
    def __init__(self, x):
        self.x = x

    def __del__(self):
        print("__del__ called!")


def build_dataset(obj):
    def _generator():
        while True:
            yield tf.convert_to_tensor(obj.x, dtype=tf.float32)

    return tf.data.Dataset.from_generator(_generator, output_signature=tf.TensorSpec(shape=(), dtype=tf.float32))


def train_for_a_fold(fold):
    dataset = build_dataset(SomeObj(fold))
    for value in dataset.take(5):
        print(fold, float(value))


for fold in range(3):
    train_for_a_fold(fold)
