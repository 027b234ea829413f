"""Advisory: on Python ≥ 3.11, TensorFlow before 2.17 leaks a little on every eager op.

TF issue 62551. Measured here per 100,000 `tf.zeros([1])` calls (shared/FINDINGS.md, issue 9):
9 MB on TF 2.12–2.15, 64 MB on 2.16, 0 from 2.17. The leak is in TF's C++ bindings, below
anything a Python patch can reach, so this entry patches nothing: it tells the user the remedy.
"""

from __future__ import annotations

from ..core.environment import Environment
from ..core.gate import Gate

NAME = "py311_eager_op_leak"
TITLE = "Advisory: every eager op leaks a little on Python ≥ 3.11 with TensorFlow < 2.17"
ISSUE_URL = "https://github.com/tensorflow/tensorflow/issues/62551"
GATE = Gate(versions=">=2.12,<2.17", python=">=3.11")  # 2.12: the first TF for Python 3.11

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
