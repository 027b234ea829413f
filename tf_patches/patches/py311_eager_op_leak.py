"""Advisory: on Python ≥ 3.11, TensorFlow before 2.17 leaks a little on every eager op.

TF issue 62551. Measured here per 100,000 `tf.zeros([1])` calls (docs/measurements.md, "Loops"):
9 MB on TF 2.12–2.15, 64 MB on 2.16, 0 from 2.17. The leak is in TF's C++ bindings, below
anything a Python patch can reach, so this entry patches nothing: it tells the user the remedy.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional

from ..core.canary import Finding, per_1000
from ..core.context import tf_module
from ..core.environment import Environment
from ..core.gate import Gate
from ..core.patch import Patch
from ..core.units import KIB
from ..core.signature import EagerExecutions, Installer, Probe, Signature, by_minor


# MB per 100,000 eager tf.zeros calls, by TF minor version (measured on Python 3.11).
_MEASURED_MB = {"2.12": 9, "2.13": 9, "2.14": 9, "2.15": 9, "2.16": 64}


def advise(env: Environment) -> str:
    minor = ".".join((env.version or "").split(".")[:2])
    size = _MEASURED_MB.get(minor)
    measured = f"≈{size} MB per 100,000 eager ops measured on TF {minor}" if size else "measured on TF 2.12–2.16"
    return (
        f"TensorFlow {env.version} on Python {env.python_version} leaks on every eager op "
        f"({measured}); upgrade to TensorFlow ≥ 2.17 or run on Python 3.10"
    )


# --- diagnose: the live signature ---------------------------------------------------------------
_SIGNATURE = Signature(
    unit="eager tensors made (each leaks a little on Python >= 3.11 with TF < 2.17)",
    # The leak is per EagerTensor, whether an op made it or a conversion did: one 24-byte block
    # never freed (tracemalloc, 2.12.1), 16-34 B of RSS per tensor in a fresh loop on 2.12.1
    # (tf.constant 16, tf.zeros([1]) 34: tests/test_diagnosis.py). The 64 MB per 100,000
    # tf.zeros([1]) measured on 2.16 (3 tensors each) is 213 B.
    unit_bytes=by_minor({"2.16": 213}, 24), floor=10_000,
    fix="an advisory, nothing to patch: upgrade to TensorFlow >= 2.17 or run on Python 3.10",
    name='a few bytes kept per eager tensor (Python ≥ 3.11, TensorFlow < 2.17)',
    code_fix=("make fewer eager tensors: wrap the loop's body in a `tf.function`"),
    upstream_fix='fixed in TensorFlow 2.17 (or run on Python 3.10)')


class EagerTensors(Probe):
    """The advisory's unit: eager tensors made (by ops or conversions alike), read from TF's own
    unique-id counter, which every ``EagerTensor`` takes one from (graph tensors do too, a few
    per traced op: the count is an upper bound). Nothing on the hot path."""

    def __init__(self) -> None:
        self._uid: Optional[Callable[[], int]] = None
        self._start = 0
        self._reads = 0
        self._lock = threading.Lock()

    def install(self, installer: Installer, executor: EagerExecutions) -> None:
        uid = tf_module("python.framework.ops").uid
        self._start = uid()
        self._uid = uid

    def count(self) -> int:
        if self._uid is None:
            return 0
        with self._lock:
            self._reads += 1  # each read takes an id itself
            return max(0, self._uid() - self._start - self._reads)


# --- canary: is the bug still upstream? ---------------------------------------------------------
def canary() -> Finding:
    import tensorflow as tf

    mb = per_1000(lambda: tf.zeros([1]), 30000, 2000) * 100 * KIB / 1e6
    # 9 MB per 100,000 calls on 2.12–2.15, 64 on 2.16, 0 from 2.17 (Python 3.11)
    return Finding(mb > 3, f"{mb:.1f} MB per 100,000 eager tf.zeros calls")


# --- the declaration (core/patch.py) -------------------------------------------------------------
PATCH = Patch(
    name="py311_eager_op_leak",
    title="Advisory: every eager op leaks a little on Python ≥ 3.11 with TensorFlow < 2.17"
,
    issue="https://github.com/tensorflow/tensorflow/issues/62551",
    gate=Gate(versions=">=2.12,<2.17", python=">=3.11"),  # 2.12: the first TF for Python 3.11
    advise=advise,
    signature=_SIGNATURE,
    probe=EagerTensors,
    canary=canary,
)
