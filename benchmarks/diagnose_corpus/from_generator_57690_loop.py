"""``Dataset.from_generator`` per fold: each fold's generator (and what it captured) kept.

Source: https://github.com/tensorflow/tensorflow/issues/57690 (cross validation builds a dataset
per fold; the objects its generator captures are never released)
Reproduces: the thread's ``build_dataset`` / ``train_for_a_fold``, 40 folds, each generator
capturing a 1 MiB array instead of a scalar (≈40 MiB kept).
Expected: from_generator_release
Venv: .venv
"""
import numpy as np
import tensorflow as tf


class SomeObj:
    def __init__(self, x):
        self.x = x


def build_dataset(obj):
    def _generator():
        while True:
            yield tf.convert_to_tensor(obj.x[:4], dtype=tf.float32)

    return tf.data.Dataset.from_generator(_generator, output_signature=tf.TensorSpec(shape=(4,), dtype=tf.float32))


def train_for_a_fold(fold):
    dataset = build_dataset(SomeObj(np.full(262_144, fold, dtype=np.float32)))  # 1 MiB
    for value in dataset.take(2):
        pass


for fold in range(40):
    train_for_a_fold(fold)
print("done")
