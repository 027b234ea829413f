"""``tf_patches.ray``: the public name of :mod:`tf_patches.isolation.ray` (the same module object).
Importing it does not import Ray."""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("tf_patches.isolation.ray")
