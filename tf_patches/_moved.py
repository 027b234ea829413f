"""Old module paths (0.2) that still import until 0.4: each stub at the old path calls
:func:`alias`, which warns once and makes the old name *the* new module (``sys.modules``), so
attributes read, set or monkeypatched through either name are the same."""

from __future__ import annotations

import importlib
import sys
import warnings
from types import ModuleType
from typing import Callable, Tuple


def alias(old: str, new: str) -> ModuleType:
    warnings.warn(f"{old} moved to {new} in tf-patches 0.3; the old path stops importing in 0.4",
                  DeprecationWarning, stacklevel=3)
    module = importlib.import_module(new)
    sys.modules[old] = module  # the import system returns this entry, not the stub
    return module


def forward(package: str, target: str, names: Tuple[str, ...]) -> Callable[[str], object]:
    """A ``__getattr__`` for a package that took the name of one of its modules (``tf_patches.
    isolation`` was ``isolation.py``): ``names`` are answered from ``target``, imported on first
    use, so importing the package stays as cheap as before; anything else is an AttributeError
    (which also lets ``from package import submodule`` find the submodule)."""

    def __getattr__(name: str) -> object:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(target), name)

    return __getattr__
