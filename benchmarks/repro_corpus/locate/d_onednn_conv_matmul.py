"""(d) A conv and a matmul whose bits change between oneDNN on and off: the same program, the same
inputs, other numbers on a machine where TF turns oneDNN on (TF >= 2.9 on Linux CPUs with
AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX; TF_ENABLE_ONEDNN_OPTS overrides it).

Measured on this machine (AMD EPYC, AVX512_VNNI; TF 2.21 and 2.12): this 3x3 conv (64 to 96
channels) and a 1000x777 @ 777x333 matmul change bits with oneDNN; a 512x512 matmul did not, nor
tanh, exp or a sum.

Case: d
Located: Conv2D
Line: the line marked "located here" (the conv runs first; the matmul after it differs too)
Record env: TF_ENABLE_ONEDNN_OPTS=0
Against env: TF_ENABLE_ONEDNN_OPTS=1
"""
import numpy as np
import tensorflow as tf

rng = np.random.RandomState(0)
images = tf.constant(rng.standard_normal((8, 33, 33, 64)).astype("float32"))
kernel = tf.constant(rng.standard_normal((3, 3, 64, 96)).astype("float32"))
a = tf.constant(rng.standard_normal((1000, 777)).astype("float32"))
b = tf.constant(rng.standard_normal((777, 333)).astype("float32"))


@tf.function
def forward(images, a, b):
    features = tf.nn.conv2d(images, kernel, 1, "SAME")  # located here
    return tf.reduce_mean(features), tf.reduce_mean(tf.matmul(a, b))


print("means", [float(value) for value in forward(images, a, b)])
