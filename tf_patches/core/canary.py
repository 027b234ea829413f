"""The canary: is a patch's bug still in the TensorFlow this runs under? (``dev.sh nightly``)

A patch module writes ``canary()`` in its ``# --- canary`` section (its ``Patch``'s
``canary=``): a small probe that reproduces its bug on stock TensorFlow and returns a
:class:`Finding`. ``scripts/canary.py`` runs each registered patch's canary in a fresh process,
unpatched, then applies the patch with its ``lifecycle_options`` (the ``apply_all`` keywords
under which it installs on a CPU machine) and reads its report row: still needed, fixed
upstream, or broken by a moved symbol.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any, Callable



# A collections.namedtuple: typing.NamedTuple compiles each field's annotation under `from
# __future__ import annotations` (≈60 µs a class at apply_all, issue 38).
class Finding(namedtuple("Finding", ("bug", "measured"))):
    """What a canary found: ``bug`` True where it reproduced, False where stock TF is clean, None
    where this build cannot tell (GPU-only, NVIDIA-only…); ``measured`` says what it saw."""

    __slots__ = ()


def per_1000(fn: Callable[[], Any], calls: int, warmup: int) -> float:
    """KiB of RSS per 1,000 calls of ``fn`` (least-squares slope over 5 readings after warm-up)."""
    from .memory import KIB, measure_growth  # here: patch modules import this one at apply_all

    return measure_growth(fn, calls, warmup, samples=5).slope * 1000 / KIB
