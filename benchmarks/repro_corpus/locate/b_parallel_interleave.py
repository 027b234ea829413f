"""(b) A parallel ``interleave`` and ``map`` with ``deterministic=False`` feeding a Keras model:
the elements come in the order their reads finish, so each run trains on other batches.

Case: b
Located: IteratorGetNext
Line: the line marked "located here": the batches come out of the iterator there, in another order
Why: nothing random (the weights start at zero): only the order of the elements differs; the ops
of the dataset's functions computed the same values, in another order, which is no difference.
(With keras.utils.set_random_seed(0) the order came out the same in every run here, TF 2.21.)
"""
import time

import keras
import tensorflow as tf


def load(row):  # a reader whose I/O takes 0-18 ms (the clock's microseconds mod 7, x 3 ms: as I/O varies)
    def read(value):
        time.sleep((time.perf_counter_ns() // 1000 % 7) * 0.003)
        return value

    value = tf.cast(tf.reshape(tf.numpy_function(read, [row], tf.int64), []), tf.float32)
    return tf.stack([value / 64.0, value / 32.0, 1.0, 0.5]), tf.reshape(value % 3.0, [1])


def shard(index):  # a "file" of 16 rows, read one by one
    return tf.data.Dataset.range(index * 16, index * 16 + 16).map(load)


# The files read in parallel, each row taken from whichever file has one ready first. (A parallel
# map(..., deterministic=False) right before batch() came out in order here: TF fuses the two
# into MapAndBatch, which keeps the order.)
data = tf.data.Dataset.range(4).interleave(shard, cycle_length=4, num_parallel_calls=4, deterministic=False).batch(5)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, kernel_initializer="zeros")])
optimizer = keras.optimizers.SGD(0.1)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x) - y) ** 2)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss


for x, y in data:  # located here
    loss = train_step(x, y)
print("loss", float(loss))
