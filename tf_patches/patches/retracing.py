"""Diagnose only: a ``tf.function`` traced again and again (retracing), counted at the user's line.

TF 124972 (open on 2.21), 50765, 31842, 38002, and Keras 3 ``train_on_batch`` slow-downs (TF 67033):
a ``tf.function`` called with new Python values (``step(x, i)`` with ``i`` a Python int) or new
shapes traces a new graph per call and keeps it in the function's cache while the function lives.
Measured here (CPU, fresh processes, docs/measurements.md, "Today's stack"): 165 KiB per trace
on TF 2.21, 206–212
KiB on 2.12/2.14; deleting the function gives back ≈80 %, the rest is reused; new functions traced
once and deleted do not grow. No patch can change it without changing what the function computes
(a Python value is a constant of its graph), so this entry patches nothing: its probe counts the
retraces for ``tf-patches diagnose`` and the report says the fix in the user's code —
``reduce_retracing=True``, an ``input_signature``, tensors instead of Python scalars.

It advises nothing outside a diagnosis: retracing a few times is normal (Keras traces its step
functions once per input shape), and a warning in every program that imports TF would be noise
(TF warns itself after 5 retraces in 10 calls). ``apply_all`` lists it skipped, with that reason;
a diagnosis arms its probe (it checks preconditions with :data:`core.signature.DIAGNOSING`).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from ..core.canary import Finding, per_1000
from ..core.context import tf_module
from ..core.environment import Environment
from ..core.gate import Gate
from ..core.patch import Patch
from ..core.units import KIB
from ..core.signature import DIAGNOSING, EagerExecutions, Installer, Probe, Signature, by_minor

_FUNCTION_MODULE = "python.eager.polymorphic_function.polymorphic_function"


def precondition(env: Environment, options: Mapping[str, Any]) -> Optional[str]:
    if options.get(DIAGNOSING):
        return None
    return ("nothing to patch (a Python value is a constant of the traced graph); "
            "`tf-patches diagnose` counts retraces and names the line")


def advise(env: Environment) -> str:
    """Nothing to say before a retrace is seen: the report gives the fix where the probe counts them."""
    return ""


# --- diagnose: the live signature ---------------------------------------------------------------
_SIGNATURE = Signature(
    unit="retraces (a tf.function traced again while it lives: a new graph kept per new Python value or shape)",
    # The RSS slope per trace of a function kept alive, Python ints or new shapes (docs/measurements.md).
    unit_bytes=by_minor({"2.12": 209 * KIB, "2.14": 209 * KIB, "2.21": 165 * KIB}, None), floor=10,
    fix="nothing to patch: change the call (below)",
    name="a tf.function traced again for new Python values or shapes, each graph kept while the function lives",
    code_fix=("pass tensors instead of Python numbers (`step(x, tf.constant(i))`), give the function an "
              "`input_signature=[tf.TensorSpec([None, ...], dtype)]`, or `@tf.function(reduce_retracing=True)` "
              "for shapes that vary"),
    upstream_fix="by design: each new Python value or shape is a new graph (TF 124972, 50765)")


class Retraces(Probe):
    """Traces of a ``tf.function`` that was traced already, read from its own tracing count
    around each call (``experimental_get_tracing_count``, the count TF's retracing warning
    reads), at the user's line that called it. A function's first call (one trace, or two when
    it creates variables) is not a retrace; new functions traced once each are not either."""

    def __init__(self) -> None:
        self._count = 0

    def install(self, installer: Installer, executor: EagerExecutions) -> None:
        function_cls = tf_module(_FUNCTION_MODULE).Function
        original = function_cls.__call__
        sites = self.sites

        def __call__(function: Any, *args: Any, **kwargs: Any) -> Any:
            if not installer.active:
                return original(function, *args, **kwargs)
            before = function.experimental_get_tracing_count()
            result = original(function, *args, **kwargs)
            traced = function.experimental_get_tracing_count() - before
            if traced > 0 and before > 0:
                self._count += traced
                sites.hit(traced)
            return result

        __call__.__wrapped__ = original  # type: ignore[attr-defined]
        installer.replace(function_cls, "__call__", __call__)

    def count(self) -> int:
        return self._count


# --- canary: is the bug still upstream? ---------------------------------------------------------
def canary() -> Finding:
    import tensorflow as tf

    @tf.function
    def step(x: Any, i: int) -> Any:
        return x * i

    x = tf.constant(1.0)
    calls = iter(range(10**9))
    kib = per_1000(lambda: step(x, next(calls)), 200, 20)
    # 2.21: ≈165,000 KiB per 1,000 retraces; by design, so "still needed" is the expected reading.
    return Finding(kib > 50_000, f"{kib:,.0f} KiB per 1,000 calls with a new Python int each")


# --- the declaration (core/patch.py) -------------------------------------------------------------
PATCH = Patch(
    name="retracing",
    title="Diagnose only: a tf.function traced again per call (new Python values or shapes)",
    issue="https://github.com/tensorflow/tensorflow/issues/124972",
    gate=Gate(versions=">=2.12"),  # tf.function's class at polymorphic_function.Function from 2.12
    precondition=precondition,
    advise=advise,
    signature=_SIGNATURE,
    probe=Retraces,
    canary=canary,
)
