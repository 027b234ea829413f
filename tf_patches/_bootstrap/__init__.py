"""The bootstrap folder. ``tf-patches run`` puts it first on ``PYTHONPATH``, and the line in
``tf_patches_auto.pth`` first on ``sys.path`` when ``TF_PATCHES_AUTO`` is on, so that the
interpreter's own ``import sitecustomize`` at start-up runs ``sitecustomize.py`` from here.

The .pth line only points the way instead of applying the patches itself: ``.pth`` files run while
``site`` is still adding folders to ``sys.path`` (a venv's packages before the system's), so
TensorFlow could not be found yet; ``sitecustomize`` runs once ``sys.path`` is complete.
"""

from __future__ import annotations

import os
import sys

DIRECTORY = os.path.dirname(os.path.abspath(__file__))
AUTO_VARIABLE = "TF_PATCHES_AUTO"


def activate_from_environment() -> None:
    """Called by the .pth line whenever ``TF_PATCHES_AUTO`` is set: a true value (``1``, ``true``,
    ``yes``, ``on``) puts this folder first on ``sys.path``; a bad value warns and does nothing, as
    a bad ``TF_PATCHES_*`` variable does."""
    from ..options import Option, flag, from_environment

    enabled = from_environment(Option("auto", AUTO_VARIABLE, flag, False, "1: apply at every start"))
    if enabled and DIRECTORY not in sys.path:
        sys.path.insert(0, DIRECTORY)
