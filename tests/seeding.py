"""What a process draws first from each generator tf-patches seeds (Python's random, NumPy's
global generator, TensorFlow's global seed): the oracle for the seeds across processes tests."""

from __future__ import annotations

import random

import tf_patches


def first_draws() -> list:
    import numpy as np
    import tensorflow as tf

    return [random.random(), float(np.random.random()), float(tf.random.uniform([]))]


def seeded_draws(item: int) -> list:
    """In an isolated child or a Ray worker: where its seed came from (its report), then its draws."""
    import tensorflow  # noqa: F401  (the patches apply at its import)

    return [tf_patches.report()["op_determinism"].reason, *first_draws()]


def draws_after(seed: int) -> list:
    """What a process seeded with ``seed`` draws first, drawn in this one."""
    tf_patches.seed_everything(seed)
    return first_draws()
