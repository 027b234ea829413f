"""The bootstrap folder. ``tf-patches run`` puts it first on ``PYTHONPATH``, and the line in
``tf_patches_auto.pth`` first on ``sys.path`` when ``TF_PATCHES_AUTO`` is on, so that the
interpreter's own ``import sitecustomize`` at start-up runs ``sitecustomize.py`` from here.

The .pth line only points the way instead of applying the patches itself: ``.pth`` files run while
``site`` is still adding folders to ``sys.path`` (a venv's packages before the system's), so
TensorFlow could not be found yet; ``sitecustomize`` runs once ``sys.path`` is complete.

Start-up stays cheap (standard library only, no ``tf_patches`` module but this one and
``importhook``): the bootstrap only *defers* ``apply_all()`` to the moment TensorFlow starts
importing (before any of its code runs, so environment variables set then are read), or to the
first ``tf_patches.report()``/``settings()``, whichever comes first. An interpreter that never
imports TensorFlow never loads the registry, ``packaging`` or the version detection.
"""

import os
import sys
# No `from __future__ import annotations` either (it imports the __future__ module, which plain
# Python does not): annotations are strings instead. tests/test_wheel.py checks the module set.

TYPE_CHECKING = False  # typing.TYPE_CHECKING, which type checkers read alike

if TYPE_CHECKING:  # typing's names only for checkers: importing them costs start-up time
    from typing import Callable

DIRECTORY = os.path.dirname(os.path.abspath(__file__))
AUTO_VARIABLE = "TF_PATCHES_AUTO"
# Imports that start the deferred apply_all(): TensorFlow (its code lives in tensorflow_core on TF
# 1.15–2.1), and PyTorch when determinism is asked for (its switches must precede CUDA's start).
TRIGGERS = ("tensorflow", "tensorflow_core")
TORCH_TRIGGER = "torch"
DETERMINISTIC_VARIABLE = "TF_PATCHES_DETERMINISTIC"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")
armed = False  # whether this process armed the deferred apply (read by core.environment: hidden?)

# The evidence a tool's session asks of every Python process of its command's tree: the variable
# it sets (to its evidence folder), the module whose ``arm_from_environment()`` the bootstrap calls
# at start-up where that variable is set, and what a failure to arm costs. The one table: the tools
# import their variable from here (already loaded at start-up, so free), and nothing else names a
# module of theirs. By name, as the .pth names this package: the bootstrap imports no tool unless asked.
DIAGNOSE_VARIABLE = "TF_PATCHES_DIAGNOSE_DIR"  # tf-patches diagnose: each process writes <pid>.json there
REPRO_VARIABLE = "TF_PATCHES_REPRO_DIR"  # tf-patches repro: each process records its evidence there
EVIDENCE = (
    (DIAGNOSE_VARIABLE, "tf_patches.diagnosis.sampler", "diagnosis not armed, this process is not counted"),
    (REPRO_VARIABLE, "tf_patches.repro.evidence", "repro evidence not armed, this process is not recorded"),
)


def activate_from_environment() -> None:
    """Called by the .pth line whenever ``TF_PATCHES_AUTO`` is set: a true value (``1``, ``true``,
    ``yes``, ``on``) puts this folder first on ``sys.path``; a bad value warns and does nothing, as
    a bad ``TF_PATCHES_*`` variable does."""
    value = os.environ.get(AUTO_VARIABLE, "").strip().lower()
    if value in _TRUE:
        enabled = True
    elif value in _FALSE:
        enabled = False
    else:  # the one full check every option has, for its ConfigWarning (options is not cheap)
        from ...core.options import Option, flag, from_environment

        enabled = from_environment(Option("auto", AUTO_VARIABLE, flag, False, "1: apply at every start"))
    if enabled and DIRECTORY not in sys.path:
        sys.path.insert(0, DIRECTORY)


def defer(apply: "Callable[[], None]") -> None:
    """Run ``apply()`` once: when a trigger starts importing, or when the engine first reads its
    state (``report()``, ``settings()``, ``apply_all()``, ``revert_all()`` disarms it): registered
    with ``core.importhook``, which the engine asks, so core never names this tool."""
    from ...core import importhook

    global armed
    triggers = TRIGGERS
    if os.environ.get(DETERMINISTIC_VARIABLE, "").strip().lower() in _TRUE:
        triggers += (TORCH_TRIGGER,)
    importhook.defer(apply, triggers)
    armed = True


def arm() -> None:
    """Apply tf-patches at ``import tensorflow`` (or now, if it is imported already), options from
    the ``TF_PATCHES_*`` variables: what this bootstrap does at start-up, for hosts that start
    processes their own way (Ray's worker set-up hook)."""
    from .sitecustomize import apply_from_environment

    defer(apply_from_environment)


def run_deferred() -> None:
    """Apply now what the bootstrap deferred (nothing if it ran already or was disarmed)."""
    from ...core import importhook

    importhook.run_deferred()


def disarm() -> None:
    """Forget the deferred apply (``revert_all()`` before TensorFlow was imported)."""
    from ...core import importhook

    importhook.disarm()
