"""(e) Sums whose bits change with the intra-op thread count: TF splits a reduction among its
threads, and float addition in another grouping rounds otherwise.

Measured on this machine (2 cores; TF 2.21 and 2.12): TF_NUM_INTRAOP_THREADS 1 vs 2 changed the
bits of a float32 sum of 1,000,003 normal values for about half the vectors drawn (so 8 are
summed: at least one differs); a matmul and a conv did not change with it.

Case: e
Located: Sum
Line: the line marked "located here" (one of the 8 sums built there)
Record env: TF_NUM_INTRAOP_THREADS=1
Against env: TF_NUM_INTRAOP_THREADS=2
"""
import numpy as np
import tensorflow as tf

rng = np.random.RandomState(1)
vectors = [tf.constant(rng.standard_normal(1_000_003).astype("float32")) for _ in range(8)]


@tf.function
def totals(vs):
    return [tf.reduce_sum(v) for v in vs]  # located here


print("totals", [float(t) for t in totals(vectors)])
