"""Every registered patch through its whole life, as dd-trace's ``PatchTestCase`` does for its
integrations: a patch added to ``registry.PATCH_MODULES`` gets each check here by being registered
(what it needs to install on this CPU machine is its ``Patch``'s ``lifecycle_options``, read from the
registry; tests/test_registry_discovery.py runs these checks on a patch registered by a test).

A patch that does not apply to this TensorFlow (``keras2_predict_loop`` on 2.21, the advisories)
must say so in its report row, for its gate's reason, and change nothing; a check of what it
replaces is then skipped with that reason, never passed with nothing checked.
The checks that need a clean interpreter share three fresh processes.
"""

from __future__ import annotations

import inspect
import json
import sys
import types
import warnings
from typing import Any, Dict, List, Optional, Tuple

import pytest

import tf_patches
from tf_patches.core import context
from tf_patches.core import engine
from tf_patches.core import registry
from tf_patches.core.context import Replaced, tf_module
from tf_patches.core.options import resolve
from tf_patches.patches import rfft_guard

from .fresh import run_fresh

PATCHES = registry.PATCH_MODULES
USER_MODULE = "lifecycle_user_code"
# (module under tensorflow, attribute) a patch that replaces nothing on this TF needs: what the
# moved-symbol check deletes for it (the others' are the attributes they replace).
NEEDS: Dict[str, Tuple[Tuple[str, str], ...]] = {
    "op_determinism": (("python.framework.config", "enable_op_determinism"),),
}


def _spec(name: str) -> registry.Patch:
    found = registry.by_name(name)
    assert found is not None, f"{name} is not registered"
    return found


def _kwargs(name: str) -> Dict[str, Any]:
    """apply_all keywords under which the patch installs on this CPU machine where the defaults do
    not (its Patch's lifecycle_options): an opt-in asked for, another build described (env=)."""
    return dict(_spec(name).lifecycle_options)


def _apply(name: str) -> tf_patches.Report:
    return tf_patches.apply_all(only=[name], **_kwargs(name))


def _replaced(name: str) -> List[Replaced]:
    state = engine._states.get(name)
    return list(state.ctx.replaced) if state is not None and state.ctx is not None else []


def _skip_if_nothing_replaced(name: str, report: tf_patches.Report) -> None:
    """A check of replacements proves nothing where the patch replaces nothing on this TF: its row
    must say why (the gate's reason, or an installed patch that replaces no attribute), then the
    test is skipped with that reason rather than passed."""
    if _replaced(name):
        return
    status = _check_row(name, report)
    pytest.skip(f"{name} replaces nothing on TF {report.environment.version}: {status}"
                + (f": {report[name].reason}" if report[name].reason else ""))


def _expected(name: str, env: Any) -> Tuple[str, Optional[str]]:
    """The status the patch's own gate and precondition promise here, and the reason if skipped."""
    spec = _spec(name)
    given = {key: value for key, value in _kwargs(name).items() if key != "env"}
    verdict, reason = spec.check(env, resolve(registry.all_options(), given, environ={}))
    if verdict is False:
        return "skipped", reason
    return ("advised" if spec.advise else "applied"), None


def _check_row(name: str, report: tf_patches.Report) -> str:
    row = report[name]
    status, reason = _expected(name, report.environment)
    assert row.status == status, row.reason
    if reason is not None:
        assert row.reason == reason
    return status


@pytest.fixture
def installs(monkeypatch):
    """Count each patch's installs (the registered spec swapped for a counting copy)."""
    counts: Dict[str, int] = {}
    specs = list(registry.specs())
    for index, spec in enumerate(specs):
        def counted(ctx, _install=spec.install, _name=spec.name):
            counts[_name] = counts.get(_name, 0) + 1
            return _install(ctx)

        specs[index] = spec._replace(install=counted)
    monkeypatch.setattr(registry, "_specs", specs)
    return counts


def _installed_function(owner: Any, attribute: str) -> Any:
    """The function ``owner.attribute`` is: a classmethod read from its class is a bound method."""
    value = getattr(owner, attribute)
    return getattr(value, "__func__", value)


# -- in this process: TensorFlow imported first -------------------------------------------------

@pytest.mark.parametrize("name", PATCHES)
def test_import_then_apply_twice_installs_once(tf, installs, name):
    first = _apply(name)
    status = _check_row(name, first)
    replaced = _replaced(name)
    assert all(_installed_function(r.owner, r.attribute) is r.replacement for r in replaced)
    assert status == "applied" or not replaced
    second = _apply(name)
    assert second[name] == first[name]
    assert installs.get(name, 0) == (status == "applied")
    assert [r.replacement for r in _replaced(name)] == [r.replacement for r in replaced]


# Packages whose module state changes by itself while a test runs: tf-patches and its import hooks,
# and the test tooling (hypothesis's gc callbacks rewrite its own module globals at any collection).
_OWN_STATE = ("tf_patches", "hypothesis", "_hypothesis_pytestplugin", "_pytest", "pytest", "pluggy")


def _namespaces() -> Dict[int, Tuple[Any, Dict[str, Any]]]:
    """A shallow copy of the namespace of every loaded module (``_OWN_STATE`` aside), and of every
    class and object with a ``__dict__`` bound in one."""
    found: Dict[int, Tuple[Any, Dict[str, Any]]] = {}
    for name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if type(namespace) is not dict or name.partition(".")[0] in _OWN_STATE:
            continue
        found[id(module)] = (module, dict(namespace))
        for value in list(namespace.values()):
            own = getattr(value, "__dict__", None) if not isinstance(value, types.ModuleType) else None
            if own is not None and id(value) not in found and (isinstance(value, type) or type(own) is dict):
                found[id(value)] = (value, dict(own))
    return found


def _assert_unchanged(before: Dict[int, Tuple[Any, Dict[str, Any]]], targets: List[Tuple[Any, str]]) -> None:
    """Every module and class binds each name to the object it did (``is``) and has gained none but
    the submodules TF's lazy imports bind: no shadowing copy, no trace of the patch. Objects are
    checked only for the attributes the patch replaced (their other state is theirs to change)."""
    for owner, attribute in targets:
        _, names = before[id(owner)]
        assert vars(owner).get(attribute, names) is names.get(attribute, names), f"{owner}.{attribute}"
    for owner, names in before.values():
        if not isinstance(owner, (types.ModuleType, type)):
            continue
        now = vars(owner)
        where = getattr(owner, "__name__", owner)
        assert [key for key in names if key not in now] == [], f"{where} lost names"
        assert [key for key, value in names.items() if now.get(key) is not value] == [], f"{where} changed"
        # (__warningregistry__: the warnings module's own note that a warning was shown from there)
        added = [key for key in now if key not in names and not isinstance(now[key], types.ModuleType)
                 and key != "__warningregistry__"]
        assert added == [], f"{where} gained names"


def _assert_no_gorilla() -> None:
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if type(namespace) is not dict:
            continue
        owners = [module] + [value for value in namespace.values() if isinstance(value, type)]
        left = [f"{getattr(owner, '__name__', owner)}.{key}" for owner in owners
                for key in vars(owner) if key.startswith("_gorilla")]
        assert not left, left


@pytest.mark.parametrize("name", PATCHES)
def test_apply_revert_apply_restores_the_same_objects(tf, name):
    tf_module("python.eager.context").ensure_initialized()  # TF's own lazy state, made at first use
    before = _namespaces()
    targets: List[Tuple[Any, str]] = []
    for _ in range(2):
        report = _apply(name)
        _check_row(name, report)
        _skip_if_nothing_replaced(name, report)
        replaced = _replaced(name)
        assert not targets or [(r.owner, r.attribute) for r in replaced] == targets
        targets = [(r.owner, r.attribute) for r in replaced]
        for r in replaced:
            assert _installed_function(r.owner, r.attribute) is r.replacement
            assert tf_patches.is_patched(r.replacement) and tf_patches.get_original(r.replacement) is r.original
        tf_patches.revert_all()
        # Modules the first install imported (and their objects) are checked from the second on.
        before = {**_namespaces(), **before}
        _assert_unchanged(before, targets)
        assert not any(tf_patches.is_patched(r.replacement) for r in replaced)
    _assert_no_gorilla()


def _arguments(function: Any) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
    """Distinct objects for each parameter of ``function`` (one more for ``*args``/``**kwargs``)."""
    args: List[Any] = []
    kwargs: Dict[str, Any] = {}
    for parameter in inspect.signature(function, follow_wrapped=False).parameters.values():
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD, parameter.VAR_POSITIONAL):
            args.append(object())
        else:
            kwargs[parameter.name if parameter.kind == parameter.KEYWORD_ONLY else "extra"] = object()
    return tuple(args), kwargs


def assert_passes_through(wrapper: Any, original: Any) -> None:
    """``wrapper`` calls ``original`` with exactly its arguments, returns its result, and calls
    nothing else: its original (a closure cell) is swapped for a recorder, and the calls made in
    the wrapper's frame are profiled."""
    # A bound method is made anew at each attribute read: a wrapper that read its original before
    # installing itself (issue 32: what it falls back on exists first) holds an equal one.
    cells = [cell for cell in wrapper.__closure__ or () if cell.cell_contents is original
             or (inspect.ismethod(original) and cell.cell_contents == original)]
    assert cells, f"{wrapper} must close over its original (see tf_patches/context.py)"
    result, calls, events = object(), [], []

    def recorder(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        return result

    def profile(frame: Any, event: str, arg: Any) -> None:
        if frame.f_code is wrapper.__code__:
            events.append((event, getattr(arg, "__name__", None) if event == "c_call" else frame.f_code.co_name))
        elif event in ("call", "return") and frame.f_back is not None and frame.f_back.f_code is wrapper.__code__:
            events.append((event, frame.f_code.co_name))

    args, kwargs = _arguments(wrapper)
    for cell in cells:
        cell.cell_contents = recorder
    try:
        sys.setprofile(profile)
        try:
            returned = wrapper(*args, **kwargs)
        finally:
            sys.setprofile(None)
    finally:
        for cell in cells:
            cell.cell_contents = original
    name = wrapper.__code__.co_name
    assert events == [("call", name), ("call", "recorder"), ("return", "recorder"), ("return", name)]
    assert calls == [(args, kwargs)] and returned is result


def _hold(owner: Any, prefix: str, values: List[Any], monkeypatch) -> None:
    for index, value in enumerate(values):
        monkeypatch.setattr(owner, f"{prefix}{index}", value, raising=False)


def _held(owner: Any, prefix: str, count: int) -> List[Any]:
    return [getattr(owner, f"{prefix}{index}") for index in range(count)]


@pytest.mark.parametrize("name", PATCHES)
def test_user_references_are_untouched_and_pass_through_after_revert(tf, monkeypatch, name):
    _skip_if_nothing_replaced(name, _apply(name))
    originals = [r.original for r in _replaced(name)]
    tf_patches.revert_all()
    user = types.ModuleType(USER_MODULE)
    main = sys.modules["__main__"]
    monkeypatch.setitem(sys.modules, USER_MODULE, user)
    monkeypatch.setitem(sys.modules, "__mp_main__", main)  # multiprocessing's alias of __main__
    for owner in (user, main):
        _hold(owner, "_lifecycle_before_", originals, monkeypatch)  # `from tf... import f` before
    with warnings.catch_warnings():
        # A patch may warn that user code holds what it replaced (rfft_guard does): its own test says it.
        warnings.simplefilter("ignore", tf_patches.TfPatchesWarning)
        _check_row(name, _apply(name))
    replaced = _replaced(name)
    assert [r.original for r in replaced] == originals
    held = [f"{USER_MODULE}._lifecycle_before_{i}" for i, r in enumerate(replaced)
            if r.everywhere and not r.narrowed]  # api_only / within search part of TF alone
    if held:
        assert set(held) <= set(engine._states[name].ctx.user_bindings)
    wrappers = [r.replacement for r in replaced]
    for owner in (user, main):
        assert all(a is b for a, b in zip(_held(owner, "_lifecycle_before_", len(originals)), originals))
        _hold(owner, "_lifecycle_after_", wrappers, monkeypatch)  # taken after apply_all()
    tf_patches.revert_all()
    for owner in (user, main):
        assert all(a is b for a, b in zip(_held(owner, "_lifecycle_before_", len(originals)), originals))
        assert all(a is b for a, b in zip(_held(owner, "_lifecycle_after_", len(wrappers)), wrappers))
    for r in replaced:
        if r.everywhere:
            assert_passes_through(r.replacement, r.original)


@pytest.mark.parametrize("name", PATCHES)
def test_no_binding_of_a_replaced_function_is_left_in_tf_packages(tf, name):
    """replace_everywhere (narrowed or not) reaches every binding in TF's packages: a search of all
    loaded modules finds the original nowhere there once the patch is applied."""
    report = _apply(name)
    _check_row(name, report)
    if not any(r.everywhere for r in _replaced(name)):
        pytest.skip(f"{name} rebinds nothing everywhere on TF {report.environment.version}: "
                    f"{report[name].status}" + (f": {report[name].reason}" if report[name].reason else ""))
    # Searched here in plain Python, not with context._bindings: the search under test is no oracle.
    left = [f"{module_name}.{attribute}" for r in _replaced(name) if r.everywhere
            for module_name, module in list(sys.modules.items())
            if context._library_module(module_name, module)
            for attribute, value in list(getattr(module, "__dict__", {}).items()) if value is r.original]
    assert left == []


@pytest.mark.parametrize("mode", rfft_guard.MODES)
def test_each_guard_mode_passes_through_after_revert(tf, mode):
    tf_patches.apply_all(only=["rfft_guard"], rfft_guard=mode, **_kwargs("rfft_guard"))
    replaced = _replaced("rfft_guard")
    assert replaced
    tf_patches.revert_all()
    for r in replaced:
        assert_passes_through(r.replacement, r.original)


def _homes(owner: Any, attribute: str) -> List[Any]:
    """Every namespace ``owner.attribute`` could be found in: the owner's and, for a method, each
    class of its MRO that defines one (so that none is found once all are taken away)."""
    if not isinstance(owner, type) and attribute in getattr(owner, "__dict__", {}):
        return [owner]
    mro = owner.__mro__ if isinstance(owner, type) else type(owner).__mro__
    return [klass for klass in mro if klass is not object and attribute in vars(klass)]


@pytest.mark.parametrize("name", PATCHES)
def test_a_moved_symbol_fails_that_patch_alone(tf, monkeypatch, name):
    baseline = tf_patches.apply_all(**_kwargs(name))
    targets = [(r.owner, r.attribute) for r in _replaced(name)]
    tf_patches.revert_all()
    if _check_row(name, baseline) != "applied":
        assert not targets  # nothing installed here, so nothing can move: the row says why
        pytest.skip(f"{name} installs nothing on TF {baseline.environment.version}: "
                    f"{baseline[name].status}: {baseline[name].reason}")
    if not targets:  # a patch that replaces nothing: what it needs, named above
        targets = [(tf_module(dotted), attribute) for dotted, attribute in NEEDS.get(name, ())]
        assert targets, f"{name} replaces nothing here: name what it needs in NEEDS above"
    for owner, attribute in targets:
        for home in _homes(owner, attribute):
            monkeypatch.delattr(home, attribute)
    report = tf_patches.apply_all(**_kwargs(name))
    row = report[name]
    assert row.status == "failed" and any(attribute in row.reason for _, attribute in targets), row.reason
    assert {r.name: r.status for r in report if r.name != name} == {
        r.name: r.status for r in baseline if r.name != name}


# -- fresh processes: the first apply_all(), from 16 threads, before and after `import tensorflow`

FIRST_CALL = """
import json, sys, threading
{import_first}
import tf_patches
from tf_patches.core import engine
from tf_patches.core import registry
from tf_patches.core.context import PatchContext

kwargs = json.loads({kwargs!r})
assert not registry._specs and not any(m.startswith("tf_patches.patches.") for m in sys.modules)
counts, lock, init = {{}}, threading.Lock(), PatchContext.__init__
def counted(self, name, *args):  # one context per patch started: installed, or deferred once
    with lock:
        counts[name] = counts.get(name, 0) + 1
    init(self, name, *args)
PatchContext.__init__ = counted
barrier, reports = threading.Barrier(16), []
def call():
    barrier.wait()
    reports.append(tf_patches.apply_all(**kwargs))
threads = [threading.Thread(target=call) for _ in range(16)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
tf_imported = "tensorflow" in sys.modules
before = {{row.name: row.status for row in tf_patches.report()}}
import tensorflow
held = lambda value: getattr(value, "__func__", value)  # a classmethod is read as a bound method
# Where two patches replace one attribute (seed_kernel_cache's op wrappers, which
# dataset_epoch_repeat's rerandomize wraps in turn), the later one's original is the earlier one's
# replacement: each is in place if the owner holds it or a replacement that wraps it.
wrapped_by = {{(id(r.owner), r.attribute, id(held(r.original))): held(r.replacement)
              for state in engine._states.values() if state.ctx is not None for r in state.ctx.replaced}}
def in_chain(r):
    current, seen = held(r.replacement), 0
    while current is not held(getattr(r.owner, r.attribute)) and seen < 8:
        current, seen = wrapped_by.get((id(r.owner), r.attribute, id(current))), seen + 1
    return seen < 8
in_place = {{name: [in_chain(r) for r in state.ctx.replaced]
            for name, state in engine._states.items() if state.ctx is not None}}
print(json.dumps({{"rows": [[row.name for row in report] for report in reports], "counts": counts,
                  "tf_imported": tf_imported, "before": before, "in_place": in_place,
                  "after": {{row.name: [row.status, row.reason] for row in tf_patches.report()}}}}))
"""


def _config(name: str) -> Tuple[str, Dict[str, Any]]:
    """The fresh process a patch is checked in: one for every patch that installs under the
    default machine (with every opt-in asked for), one per described machine."""
    kwargs = _kwargs(name)
    if "env" in kwargs:
        return name, kwargs
    common: Dict[str, Any] = {}
    for name in PATCHES:
        options = _kwargs(name)
        if "env" not in options:
            common.update(options)
    return "detected", common


@pytest.fixture(scope="module")
def first_calls() -> Dict[Tuple[str, bool], Any]:
    """Each configuration's fresh process (TF imported first, or after): run once, shared."""
    results = {}
    for name in PATCHES:
        config, kwargs = _config(name)
        orders = (True, False) if config == "detected" else (False,)
        for tf_first in orders:
            if (config, tf_first) not in results:
                code = FIRST_CALL.format(import_first="import tensorflow" if tf_first else "",
                                         kwargs=json.dumps(kwargs))
                results[(config, tf_first)] = run_fresh(code)
    return results


@pytest.mark.parametrize("name", PATCHES)
def test_first_call_from_16_threads_installs_once(tf, first_calls, name):
    config, kwargs = _config(name)
    env = tf_patches.Environment.from_dict(kwargs["env"]) if "env" in kwargs else tf_patches.detect()
    status, reason = _expected(name, env)
    for (which, tf_first), result in first_calls.items():
        if which != config:
            continue
        assert all(rows == list(PATCHES) for rows in result["rows"]) and len(result["rows"]) == 16
        assert result["tf_imported"] is tf_first
        started = result["counts"].get(name, 0)
        if status == "applied":
            assert started == 1
        elif status != "advised":  # an advisory patches nothing: it is decided again at each call
            assert started <= 1
        assert result["after"][name][0] == status, result["after"][name]
        if reason is not None:
            assert result["after"][name][1] == reason
        if status == "applied" and not tf_first:
            assert result["before"][name] == "pending"  # apply then import: installed by the hook
        assert all(result["in_place"].get(name, []))
