"""Which Keras ``tf.keras`` is, read without importing Keras or TensorFlow: TF < 2.16 bundles the
``keras`` package (2.x); from 2.16 TF's loader (tensorflow/python/util/lazy_loader.py) takes
``tf_keras`` when ``TF_USE_LEGACY_KERAS`` is one of its true values, else ``keras`` (3)."""

from __future__ import annotations

import os
from typing import Optional, Tuple

from .environment import installed_distribution
from .versions import parse_version

KERAS_DISTRIBUTIONS = ("keras", "keras-nightly")
TF_KERAS_DISTRIBUTIONS = ("tf-keras", "tf-keras-nightly")
LEGACY_VARIABLE = "TF_USE_LEGACY_KERAS"
# TF >= 2.16's tf.keras loader takes tf_keras for these values (and only these).
LEGACY_SWITCH = ("true", "True", "1")


def keras_version() -> Optional[str]:
    """The installed ``keras`` package's version, without importing it; None if absent."""
    return installed_distribution("keras", KERAS_DISTRIBUTIONS)[1]


def tf_keras_version() -> Optional[str]:
    """The installed ``tf_keras`` package's version, without importing it; None if absent."""
    return installed_distribution("tf_keras", TF_KERAS_DISTRIBUTIONS)[1]


def legacy_switch() -> bool:
    """Whether ``TF_USE_LEGACY_KERAS`` asks TF >= 2.16 for tf_keras, as TF's own loader reads it."""
    return os.environ.get(LEGACY_VARIABLE) in LEGACY_SWITCH


def keras_is_separate(tf_version: Optional[str]) -> bool:
    """Whether TF ``tf_version`` is 2.16 or later: ``tf.keras`` no longer bundled, chosen by TF's loader."""
    release = parse_version(tf_version or "")
    return release is not None and (release.major, release.minor) >= (2, 16)


def tf_keras_package(tf_version: Optional[str]) -> str:
    """``"tf_keras"`` or ``"keras"``: the package ``tf.keras`` resolves to on TF ``tf_version``."""
    return "tf_keras" if keras_is_separate(tf_version) and legacy_switch() else "keras"


def keras_in_use(tf_version: Optional[str]) -> Tuple[str, Optional[str]]:
    """``(package, version)`` of the Keras that ``tf.keras`` resolves to on TF ``tf_version``,
    without importing it (version None: not installed)."""
    package = tf_keras_package(tf_version)
    return package, (tf_keras_version() if package == "tf_keras" else keras_version())
