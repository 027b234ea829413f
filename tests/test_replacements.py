"""Every replacement a patch installs keeps TensorFlow's identity and passes through once reverted
(issue 22), under each set of options that changes what is installed. The oracle is the original
itself: its names, docstring, signature, TF attributes (``_tf_api_names``), descriptor kind,
pickling by reference and AutoGraph's own verdict (``conversion.is_allowlisted``)."""

from __future__ import annotations

import inspect
import pickle
import sys
import types
from typing import Any, Dict, List, Tuple

import pytest

import tf_patches
from tf_patches.core import engine, registry
from tf_patches.core.context import PatchContext, Replaced, _class_descriptor, tf_module
from tf_patches.patches import rfft_guard

from .test_lifecycle import assert_passes_through

# (patch, apply_all keywords): each registered patch as the lifecycle suite installs it (its
# lifecycle_options), and every option that installs something else: finalize mode, each FFT
# guard mode on the NVIDIA build.
CONFIGS: List[Tuple[str, Dict[str, Any]]] = [(spec.name, dict(spec.lifecycle_options)) for spec in registry.specs()] + [
    ("graph_growth_guard", {"graph_growth_guard": "finalize"}),
] + [("rfft_guard", {"env": rfft_guard.REPORTED_MACHINE, "rfft_guard": mode}) for mode in rfft_guard.MODES
     if mode != rfft_guard.PATCH.options[0].default]
IDS = [f"{name}-{'-'.join(f'{k}={v}' for k, v in kwargs.items() if k != 'env') or 'defaults'}"
       + ("-nvidia" if "env" in kwargs else "") for name, kwargs in CONFIGS]
_IDENTITY = ("__module__", "__name__", "__qualname__", "__doc__")


def _install(name: str, kwargs: Dict[str, Any]) -> List[Replaced]:
    """Apply one patch; skip (with its report row) where it installs no replacement on this TF."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rfft_guard.UnsafeFFTWarning)
        row = tf_patches.apply_all(only=[name], **kwargs)[name]
    state = engine._states.get(name)
    replaced = list(state.ctx.replaced) if state is not None and state.ctx is not None else []
    if not replaced:
        pytest.skip(f"{name} installs no replacement on TF {tf_patches.report().environment.version}: "
                    f"{row.status}: {row.reason}")
    return replaced


def _found_by_name(function: Any) -> Any:
    """What pickle finds for ``function``: its module's attribute named by its qualified name."""
    found = sys.modules.get(getattr(function, "__module__", None) or "")
    for part in getattr(function, "__qualname__", "<locals>").split("."):
        found = getattr(found, part, None)
    return found


def _function(value: Any) -> Any:
    return value.fget if isinstance(value, property) else value


@pytest.mark.parametrize("name, kwargs", CONFIGS, ids=IDS)
def test_each_replacement_keeps_the_originals_identity(tf, name, kwargs):
    kinds = {}
    for r in _install(name, kwargs):
        original = _function(r.original)
        for attribute in _IDENTITY:
            assert getattr(r.replacement, attribute) == getattr(original, attribute), (r.attribute, attribute)
        assert r.replacement.__wrapped__ is original and r.replacement.__tf_patches__ == name
        assert str(inspect.signature(r.replacement)) == str(inspect.signature(original))
        assert getattr(r.replacement, "__annotations__", {}) == getattr(original, "__annotations__", {})
        for key, value in getattr(original, "__dict__", {}).items():  # _tf_api_names and the like
            if key != "__wrapped__" and not key.startswith("__tf_patches"):
                assert r.replacement.__dict__.get(key) is value, (r.attribute, key)
        if _found_by_name(original) is r.replacement:  # where stock's pickles by reference (raw_ops
            assert pickle.loads(pickle.dumps(r.replacement)) is r.replacement  # aliases do not)
        kinds[(id(r.owner), r.attribute)] = (r.owner, r.attribute, type(_class_descriptor(r.owner, r.attribute)))
    tf_patches.revert_all()
    for owner, attribute, kind in kinds.values():  # a staticmethod stays one, a function one
        assert type(_class_descriptor(owner, attribute)) is kind


@pytest.mark.parametrize("name, kwargs", CONFIGS, ids=IDS)
def test_autograph_treats_each_replacement_as_tensorflows(tf, name, kwargs):
    """AutoGraph converts what is not TensorFlow's own (its allowlist verdict differed from the
    original's for 23 of 0.2's 59 replacements); the first trace it pays for is in
    benchmarks/replacements.py."""
    conversion = tf_module("python.autograph.impl.conversion")
    for r in _install(name, kwargs):
        original = _function(r.original)
        assert conversion.is_allowlisted(r.replacement) == conversion.is_allowlisted(original), r.attribute


@pytest.mark.parametrize("name, kwargs", CONFIGS, ids=IDS)
def test_each_replacement_passes_through_once_reverted(tf, name, kwargs):
    """References user code kept (a bound ``sess.run``, the decorator, a module function) call
    exactly the original once ``revert_all()`` ran: methods and class attributes included."""
    replaced = _install(name, kwargs)
    tf_patches.revert_all()
    for r in replaced:
        assert_passes_through(r.replacement, _function(r.original))


class Shapes:
    """A class of the user's, for their own patches: each descriptor kind."""

    @staticmethod
    def area(width: int, height: int) -> int:
        """Width times height."""
        return width * height

    @classmethod
    def unit(cls) -> "Shapes":
        """One of this class."""
        return cls()

    @property
    def sides(self) -> int:
        """How many sides."""
        return 4


class Triangle(Shapes):
    @property
    def sides(self) -> int:
        return 3


def test_your_own_patch_keeps_each_descriptor_kind_and_passes_through(tf):
    env = tf_patches.detect()
    ctx = PatchContext("mine", env, {})
    calls = []

    def area(width, height):
        if not ctx.active:
            return original_area(width, height)
        calls.append("area")
        return original_area(width, height)

    def unit(cls):
        if not ctx.active:
            return original_unit(cls)
        calls.append("unit")
        return original_unit(cls)

    def sides(self):
        if not ctx.active:
            return original_sides.fget(self)
        calls.append("sides")
        return original_sides.fget(self) + 10

    original_area = ctx.replace_attribute(Shapes, "area", area)
    original_unit = ctx.replace_attribute(Shapes, "unit", unit)
    original_sides = ctx.replace_attribute(Shapes, "sides", sides)
    assert isinstance(vars(Shapes)["area"], staticmethod) and isinstance(vars(Shapes)["unit"], classmethod)
    assert isinstance(vars(Shapes)["sides"], property)
    assert Shapes.area(2, 3) == 6 and Shapes().area(2, 3) == 6  # no TypeError from a lost staticmethod
    assert type(Triangle.unit()) is Triangle  # cls is the subclass, as with the original
    assert Shapes().sides == 14 and Triangle().sides == 3  # the subclass's own property is untouched
    assert calls == ["area", "area", "unit", "sides"]
    assert Shapes.area.__qualname__ == "Shapes.area" and Shapes.area.__doc__ == "Width times height."
    assert vars(Shapes)["sides"].__doc__ == "How many sides." and tf_patches.is_patched(Shapes.unit)
    kept = Shapes.area, Shapes.unit, vars(Shapes)["sides"]
    assert ctx.revert() == []
    assert isinstance(vars(Shapes)["area"], staticmethod) and Shapes.area is original_area
    assert vars(Shapes)["sides"] is original_sides and not tf_patches.is_patched(Shapes.unit)
    assert kept[0](2, 5) == 10 and type(kept[1]()) is Shapes and kept[2].fget(Shapes()) == 4
    assert calls == ["area", "area", "unit", "sides"]  # the kept references passed through
