"""Moved to :mod:`tf_patches.core.engine` in 0.3; this path imports (with a DeprecationWarning) until 0.4."""
from ._moved import alias

alias(__name__, "tf_patches.core.engine")
