"""Parallel random maps: ``map(f, num_parallel_calls>1)`` whose ``f`` draws from stateful random
ops gives other values on every run, even under a global seed.

The parallel calls share each random op's kernel, and which element takes which draw follows
thread timing: two stock runs differ (measured here, TF 2.21 on 2 cores: 7 of 7 iterations of a
64-element ``Dataset.range(64).map(lambda i: tf.random.uniform([]), num_parallel_calls=4)``
differed from the first; docs/measurements.md, "Today's stack"). Under op determinism
(``tf.config.experimental.enable_op_determinism()``, ``apply_all(deterministic=True)``) TF runs
such a map serially and it repeats (TF 13932, 34909, 44491; NVIDIA framework-reproducibility 36:
"reproducible but painfully slow").

Detection only, no fix mode (a fix would either serialize the map, which op determinism already
does, or change its values): when a parallel map dataset is built (``num_parallel_calls`` other
than 1, ``AUTOTUNE`` included), its traced function is read once (``_dataset_functions``) for
stateful random ops with fixed seeds, and, if op determinism is off at that moment, the
``.map(`` line is warned about with both remedies: op determinism (serial), or stateless ops
seeded per element from ``Dataset.random`` zipped in (parallel and repeatable). Ops with neither
a global nor an op seed are left alone (they differ every run anyway). Op determinism is read
when the map is built. Tested with dataset_epoch_repeat, in tests/test_dataset_epoch_repeat.py
(one set of fresh processes for both).
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from ..core import traps
from ..core.canary import Finding
from ..core.context import PatchContext, tf_module
from ..core.errors import ReproducibilityWarning, logger
from ..core.gate import Gate
from ..core.patch import Patch
from . import _dataset_functions as functions

NAME = "parallel_random_map"
_TRAP = traps.Trap(
    explanation="a parallel tf.data map draws from stateful random ops, so which element gets which "
                "draw follows thread timing and the values differ from run to run",
    fix="turn on op determinism (apply_all(deterministic=True): the map then runs serially), or draw "
        "with stateless ops seeded per element from Dataset.random zipped into the dataset",
    options={"deterministic": True},
)
_AUTOTUNE = -1

_MESSAGE = (
    "{what} runs with num_parallel_calls={calls} and draws from stateful random ops ({ops}): the "
    "parallel calls share each op's stream in thread-timing order, so the values differ from run "
    "to run. Either turn on op determinism (apply_all(deterministic=True) or "
    "tf.config.experimental.enable_op_determinism(): TF then runs this map serially), or keep it "
    "parallel with stateless ops seeded per element: "
    "tf.data.Dataset.zip((ds, tf.data.Dataset.random(seed=s).batch(2))).map(lambda x, seed: "
    "... tf.random.stateless_uniform(shape, seed) ..., num_parallel_calls=...)"
)


def _op_determinism(config: Any) -> bool:
    check = getattr(config, "is_op_determinism_enabled", None)
    try:
        return bool(check()) if check is not None else False
    except Exception:
        return False


def _calls(dataset: Any, tensor_util: Any) -> Any:
    value = getattr(dataset, "_num_parallel_calls", None)
    try:
        static = tensor_util.constant_value(value) if tensor_util.is_tensor(value) else value
        return int(static) if static is not None else None
    except (TypeError, ValueError):
        return None


def _checked(original_map: Callable, parallel: type, config: Any, tensor_util: Any,
             patch: PatchContext) -> Callable:
    """map_op's ``_map_v2`` / ``_map_v1`` (what ``Dataset.map`` calls), then the check on the
    parallel map it built (once per dataset built, never per element)."""

    def map_(*args, **kwargs):
        if not patch.active:
            return original_map(*args, **kwargs)
        dataset = original_map(*args, **kwargs)
        try:
            built = dataset if isinstance(dataset, parallel) else getattr(dataset, "_dataset", None)
            if isinstance(built, parallel):
                _check(built, sys._getframe(1), config, tensor_util)
        except ReproducibilityWarning:
            raise  # the user's -W error
        except Exception as exc:  # reading the map must never break the user's pipeline
            logger.debug("tf-patches: %s: could not read the map: %s", NAME, exc)
        return dataset

    return map_


def _check(built: Any, frame: Any, config: Any, tensor_util: Any) -> None:
    calls = _calls(built, tensor_util)
    if calls == 1 or _op_determinism(config):
        return
    draws = functions.draws_of(getattr(built, "_map_func", None))  # its graph read once
    if draws is None:
        return
    what = (f"the function {draws.function!r} passed to this parallel map" if draws.function
            else "this parallel map's function")
    shown = "AUTOTUNE" if calls == _AUTOTUNE else ("a tensor" if calls is None else calls)
    traps.warn(NAME, _MESSAGE.format(what=what, calls=shown, ops=draws.describe()),
               site=draws.site or traps.user_site(frame))


def install(ctx: PatchContext) -> str:
    map_op = tf_module("python.data.ops.map_op")
    config = tf_module("python.framework.config")
    tensor_util = tf_module("python.framework.tensor_util")
    parallel = map_op._ParallelMapDataset
    # The module functions Dataset.map and DatasetV1.map call (looked up at each call), not the
    # dataset class's __init__: nothing of the Dataset classes is replaced.
    for function in ("_map_v2", "_map_v1"):
        ctx.replace_attribute(map_op, function,
                              _checked(getattr(map_op, function), parallel, config, tensor_util, ctx))
    return ("detecting: warns where a parallel map's function draws seeded stateful random numbers "
            "without op determinism (read when the map is built)")


# --- canary: is the bug still upstream? ---------------------------------------------------------
def canary() -> Finding:
    import numpy as np
    import tensorflow as tf

    tf.random.set_seed(0)
    dataset = tf.data.Dataset.range(64).map(lambda _: tf.random.uniform([]), num_parallel_calls=4)
    runs = [np.array(list(dataset.as_numpy_iterator())) for _ in range(4)]
    differ = sum(not np.array_equal(runs[0], run) for run in runs[1:])
    return Finding(differ > 0, f"{differ} of 3 iterations of a parallel seeded random map differ from the first")


# --- the declaration (core/patch.py) -------------------------------------------------------------
PATCH = Patch(
    name=NAME,
    title="Parallel tf.data maps whose random draws follow thread timing",
    issue="https://github.com/tensorflow/tensorflow/issues/13932",
    gate=Gate(versions=">=2.0"),
    install=install,
    canary=canary,
    trap=_TRAP,
)
