"""`tf.random.set_seed(1)` and still other Dense weights on every run: Keras takes its default
seeds from Python's `random`, which nothing seeded.

Source: https://github.com/keras-team/keras/issues/17007; also keras 18244, TF 57763 and
https://github.com/huggingface/transformers/pull/30504 (tests switched to keras.utils.set_random_seed)
Reproduces: a Dense layer built after tf.random.set_seed(1) alone, its first weights printed.
Expected: not repeatable
First difference: stdout line 1
Cause: keras_seed
Confirmed: yes
Fixable: yes
Venv: .venv
"""
import tensorflow as tf

tf.random.set_seed(1)
layer = tf.keras.layers.Dense(4)
layer.build((None, 3))
print("kernel", [round(float(value), 6) for value in tf.reshape(layer.kernel, [-1])[:6]])
