"""replace_everywhere's narrowed searches (issue 38: `apply_all()` in 20 ms) still reach every
binding they promise, on real TensorFlow: ``api_only`` looks a function up in TF's API modules
under its recorded public names only (``eager_py_func`` is bound there as ``py_function``), and
``within`` walks one package's modules for a ``from x import f`` copy (Keras's backend binds
``make_default_seed`` so). Each is checked against a plain walk of the modules, not the search
under test."""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any, List, Tuple

import pytest

from tf_patches.core import context
from tf_patches.core.context import PatchContext, tf_module
from tf_patches.core.environment import Environment
from tf_patches.core.frames import API_MODULES, API_PREFIXES

Scope = Tuple[Tuple[str, ...], Tuple[str, ...]]  # module names taken whole, and prefixes


def _walk(target: Any, scope: Scope) -> List[Tuple[str, str]]:
    whole, prefixes = scope
    return sorted((module_name, name) for module_name, module in list(sys.modules.items())
                  if module_name in whole or module_name.startswith(prefixes)
                  for name, value in list(getattr(module, "__dict__", {}).items()) if value is target)


def _replaced_everywhere(owner: Any, attribute: str, scope: Scope, **narrowed: Any) -> None:
    original = getattr(owner, attribute)
    whole, prefixes = scope
    scope = (whole + (owner.__name__,), prefixes)  # and the owner's own binding
    held = _walk(original, scope)
    ctx = PatchContext("test", Environment(), {})

    def replacement(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **kwargs)

    try:
        ctx.replace_everywhere(owner, attribute, replacement, **narrowed)
        assert len(held) > 1 and _walk(original, scope) == []  # none left
        assert _walk(replacement, scope) == held  # each one replaced where it was
    finally:
        ctx.revert()
    assert _walk(original, scope) == held


@pytest.mark.parametrize("module_name, attribute", [("python.framework.ops", "disable_eager_execution"),
                                                    ("python.ops.script_ops", "eager_py_func")])
def test_api_only_reaches_each_api_binding_under_any_public_name(tf, module_name, attribute):
    owner = tf_module(module_name)
    scope = (tuple(API_MODULES), tuple(API_PREFIXES))
    if attribute == "eager_py_func":  # bound under the API's name, not the function's
        assert "py_function" in {name for _, name in _walk(owner.eager_py_func, scope)}
    _replaced_everywhere(owner, attribute, scope, api_only=True)


def test_within_finds_a_from_import_copy_in_another_module_of_the_package(tf):
    keras = pytest.importorskip("keras")
    if not keras.__version__.startswith("3"):
        pytest.skip(f"Keras {keras.__version__}: make_default_seed is Keras 3's")
    generator = sys.modules["keras.src.random.seed_generator"]
    backend = sys.modules["keras.src.backend.tensorflow.random"]
    assert backend.make_default_seed is generator.make_default_seed  # `from ... import make_default_seed`
    _replaced_everywhere(generator, "make_default_seed", (("keras",), ("keras.",)), within="keras")


def _plain(scope: Scope) -> List[Tuple[str, Any]]:
    whole, prefixes = scope
    return ([(name, sys.modules[name]) for name in whole if name in sys.modules]
            + [(name, module) for name, module in list(sys.modules.items()) if name.startswith(prefixes)])


def test_one_scan_chooses_every_scopes_modules_and_a_new_module_is_seen(tf, monkeypatch):
    """The scopes' modules are chosen together in one scan of ``sys.modules`` (issue 38), each
    scope's exactly what a walk of its own gives, in load order, chosen again once a module loads;
    a scope asked for later (``within="tf_patches"``) joins them."""
    monkeypatch.setattr(context, "_scopes", list(context._scopes))
    monkeypatch.setattr(context, "_chosen", (-1, {}))
    api, keras = context._API_SCOPE, context._within("keras")
    assert context._modules(api) == _plain(api) and len(_plain(api)) > 100
    assert set(context._chosen[1]) == {api, keras}  # keras's chosen in the same scan
    assert context._modules(keras) == _plain(keras)
    chosen = context._chosen
    assert context._modules(api) is chosen[1][api]  # nothing loaded since: not chosen again
    own = context._within("tf_patches")
    assert context._modules(own) == _plain(own) and len(_plain(own)) > 10
    assert set(context._chosen[1]) == {api, keras, own}
    for name in ("keras.tf_patches_test_late", "tensorflow.compat.tf_patches_test_late"):
        monkeypatch.setitem(sys.modules, name, ModuleType(name))
        for scope in (api, keras, own):
            assert context._modules(scope) == _plain(scope)
        assert name in dict(context._modules(keras if name.startswith("keras") else api))
