"""A mapped dataset's random ops give the same values at every iteration under a global seed:
every epoch sees epoch 1's augmentation (runs repeat more than they should).

Source: https://github.com/tensorflow/tensorflow/issues/44195 ("Random ops the same for different
iterations over mapped datasets"); also TF 35682 (the same in Keras fit), 35090, 29101
Reproduces: the posted get_dataset(), iterated three times as three epochs.
Expected: repeatable
Cause: none
Trap: dataset_epoch_repeat
Confirmed: no
Fixable: no
Venv: .venv
"""
import tensorflow as tf

tf.random.set_seed(0)


def get_dataset():
    return tf.data.Dataset.range(2).map(lambda x: tf.cast(x, tf.float32) + tf.random.uniform(()))


dataset = get_dataset()
for epoch in range(3):
    print("epoch", epoch, [round(float(value), 5) for value in dataset])
