"""Advisory: ops known to stay non-deterministic on a GPU in this TensorFlow version.

Determinism switches (see ``op_determinism``) do not cover every GPU kernel; which ones are left
depends on the version. The table, with its sources, lives in ``op_determinism.KNOWN_GPU_GAPS``:
this entry tells users of a GPU machine what a seed and the switch will not make repeatable.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from ..core.canary import Finding
from ..core.environment import Environment
from ..core.gate import Gate
from ..core.patch import Patch
from .op_determinism import known_gpu_gaps


def precondition(env: Environment, options: Mapping[str, Any]) -> Optional[str]:
    silent, raising = known_gpu_gaps(env)
    if not silent and not raising:
        return f"no GPU op known to stay non-deterministic in TensorFlow {env.version}"
    return None


def advise(env: Environment) -> str:
    silent, raising = known_gpu_gaps(env)
    parts = []
    if silent:
        parts.append(f"non-deterministic on GPU even with determinism on: {', '.join(silent)}")
    if raising:
        parts.append(f"with determinism on, TF raises UnimplementedError on GPU for: {', '.join(raising)}")
    return f"TensorFlow {env.version}: " + "; ".join(parts) + " (avoid them, or run them on the CPU)"


# --- canary: is the bug still upstream? ---------------------------------------------------------
def canary() -> Finding:
    return Finding(None, "GPU only: NVIDIA's status table, not measurable on a CPU")


# --- the declaration (core/patch.py) -------------------------------------------------------------
PATCH = Patch(
    name="gpu_nondeterministic_ops",
    title="Advisory: GPU ops that stay non-deterministic in this TensorFlow version",
    issue="https://github.com/NVIDIA/framework-reproducibility/blob/master/doc/d9m/tensorflow_status.md",
    gate=Gate(versions=">=1.14", requires_gpu=True),
    precondition=precondition,
    advise=advise,
    canary=canary,
)
