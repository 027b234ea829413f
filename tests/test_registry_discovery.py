"""A patch registered with ``tf_patches.register()`` gets what a built-in one gets, with no test,
tool or script edited: the lifecycle suite's checks, ``diagnose`` counting its signature, and the
canary checking that its bug is still there. All of it is read from the patch's module through
the registry (its ``Patch``'s ``signature``, ``probe``, ``canary``, ``lifecycle_options``).

The patch, built here as a real module object declaring ``PATCH``, fixes a library of its own whose
``remember()`` keeps every argument it is given (a leak), on GPU machines only: like ``rfft_guard``,
its ``lifecycle_options`` describe such a machine, so that the checks install it on this CPU one.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
import types
from typing import Any, Dict, List

import pytest

import tf_patches
from tf_patches.core import registry
from tf_patches.core.canary import Finding
from tf_patches.core.context import PatchContext
from tf_patches.core.gate import Gate
from tf_patches.core.patch import Patch
from tf_patches.core.signature import EagerExecutions, Installer, Probe, Signature, by_minor

from . import test_lifecycle as lifecycle
from .fresh import ROOT, run_fresh
from .test_lifecycle import installs  # noqa: F401  (a fixture of the lifecycle checks run here)

NAME = "discovery_kept_arguments"
LIBRARY = "discovery_leaky_library"
ISSUE_URL = "https://example.org/discovery/issues/1"
CALLS = 50


def _machine_with_a_gpu() -> Dict[str, Any]:
    """This TensorFlow, described on a machine with a GPU (the patch's gate needs one)."""
    env = tf_patches.detect()
    return {"distribution": env.distribution, "version": env.version, "cuda_version": "12.3",
            "cudnn_version": "8.9", "gpus": [{"name": "NVIDIA A100-SXM4-40GB", "compute_capability": "8.0"}]}


def _library() -> types.ModuleType:
    library = types.ModuleType(LIBRARY)
    library.KEPT = []

    def remember(value: Any) -> Any:
        library.KEPT.append(value)  # the bug: every argument kept for good
        return value

    library.remember = remember
    return library


def _patch(library: types.ModuleType, **changes: Any) -> types.ModuleType:
    """A patch module of the built-in ones' shape (a diagnose section, a canary section, then its
    ``PATCH``), with ``changes`` to the keywords of its declaration."""
    patch = types.ModuleType("discovery_patch")

    def install(ctx: PatchContext) -> str:
        original = library.remember

        def remember(value: Any) -> Any:
            if not ctx.active:  # reverted, and held by user code: the library's own, as it is
                return original(value)
            return value

        ctx.replace_everywhere(library, "remember", remember)
        return "remember() keeps nothing"

    # --- diagnose: the live signature ---
    class KeptArguments(Probe):
        def __init__(self) -> None:
            self._start: Any = None

        def install(self, installer: Installer, executor: EagerExecutions) -> None:
            self._start = len(library.KEPT)

        def count(self) -> int:
            return 0 if self._start is None else len(library.KEPT) - self._start

    # --- canary: is the bug still upstream? ---
    def canary() -> Finding:
        before = len(library.KEPT)
        for _ in range(10):
            library.remember(object())
        kept = len(library.KEPT) - before
        return Finding(kept > 0, f"{kept} of 10 arguments kept")

    declared: Dict[str, Any] = dict(
        name=NAME, title="remember() keeps nothing", issue=ISSUE_URL, gate=Gate(requires_gpu=True),
        install=install, canary=canary, probe=KeptArguments,
        signature=Signature(unit="arguments remember() kept", unit_bytes=by_minor({}, 56), floor=8,
                            fix="the patch keeps nothing"),
        lifecycle_options={"env": _machine_with_a_gpu()})
    patch.PATCH = Patch(**{**declared, **changes})
    return patch


@pytest.fixture
def library():
    """The library, imported (in ``sys.modules``), and its patch registered; both gone after (its
    own MonkeyPatch: a test's, made later, is undone first, with the registry it swapped)."""
    library = _library()
    with pytest.MonkeyPatch.context() as patcher:
        patcher.setitem(sys.modules, LIBRARY, library)
        tf_patches.register(_patch(library))
        yield library
        tf_patches.revert_all()
        tf_patches.unregister(NAME)


def _parameters(function: Any) -> List[str]:
    return list(inspect.signature(function).parameters)


# Every check of the lifecycle suite that takes a patch's name, but those on a fresh interpreter's
# first apply_all(), which knows only the built-in patches (a registered one is registered later).
LIFECYCLE_CHECKS = [function for key, function in vars(lifecycle).items()
                    if key.startswith("test_") and "name" in _parameters(function)
                    and "first_calls" not in _parameters(function)]


def test_the_lifecycle_suite_has_checks_to_run():
    assert len(LIFECYCLE_CHECKS) >= 5, [check.__name__ for check in LIFECYCLE_CHECKS]


@pytest.mark.parametrize("check", LIFECYCLE_CHECKS, ids=lambda check: check.__name__)
def test_lifecycle_checks_run_on_a_registered_patch(tf, library, request, check):
    # The fixtures the check takes are made now, after the patch is registered (`installs` counts its installs).
    arguments = {key: NAME if key == "name" else request.getfixturevalue(key) for key in _parameters(check)}
    check(**arguments)


def test_lifecycle_installs_it_with_the_options_of_its_module(tf, library):
    report = lifecycle._apply(NAME)  # what each check above applies it with
    assert report[NAME].status == "applied", report[NAME].reason
    assert library.remember(1) == 1 and library.KEPT == []


def test_diagnose_counts_its_signature_and_names_its_fix(tf, library, monkeypatch):
    monkeypatch.setenv("TF_PATCHES_ASSUME", json.dumps(_machine_with_a_gpu()))  # the machine it is for

    def program() -> None:
        for _ in range(CALLS):
            library.remember(object())

    with tf_patches.diagnose() as diagnosis:
        program()
    assert NAME in diagnosis.snapshot().signatures
    report = diagnosis.report()
    found = [leak for leak in report.leaks if leak.patch == NAME]
    assert found, str(report)
    leak = found[0]
    assert (leak.count, leak.unit, leak.fix, leak.issue) == (CALLS, "arguments remember() kept",
                                                             "the patch keeps nothing", ISSUE_URL)
    # The declared size, never more than the process grew (it shares a heap with the suite).
    assert leak.unit_size == "measured" and leak.unit_bytes == 56
    assert leak.explained_bytes == min(CALLS * 56, max(0, report.growth_bytes))
    assert leak.fix_python == "import tf_patches; tf_patches.apply_all()" and NAME in str(report)

    tf_patches.apply_all(only=[NAME])  # the fix: the signature reads nothing
    with tf_patches.diagnose() as patched:
        program()
    assert patched.snapshot().counts()[NAME] == 0
    assert NAME not in {leak.patch for leak in patched.report().leaks}


@pytest.fixture(scope="module")
def canary_script() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("canary_script", ROOT / "scripts" / "canary.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_canary_checks_its_bug(tf, library, canary_script, capsys):
    status = canary_script.main((NAME,), runner=canary_script.check)  # in this process: it is registered here
    line = capsys.readouterr().out.splitlines()[-1]
    assert status == 0, line
    assert f"{NAME} " in line and "still needed" in line, line
    assert "10 of 10 arguments kept; report: applied" in line, line


def test_a_signature_without_its_probe_is_refused(library):
    with pytest.raises(TypeError, match="lacks probe"):
        _patch(library, name="discovery_half_a_signature", probe=None)
    assert "discovery_half_a_signature" not in registry.names()


def test_every_registered_spec_hashes_with_what_its_module_declares(library):
    """A Patch (the engine keys its settings by them) hashes with its lifecycle_options mapping."""
    specs = registry.specs()
    assert NAME in registry.names() and len({hash(spec) for spec in specs}) == len(specs)


@pytest.mark.parametrize("misspelled", ["signture", "lifecycle_option", "instal"])
def test_a_misspelled_keyword_is_refused_where_the_module_is_imported(misspelled):
    """A keyword the registry does not read would be ignored silently: Patch refuses it, by name."""
    with pytest.raises(TypeError, match=misspelled):
        _patch(_library(), name="discovery_misspelled", **{misspelled: None})
    assert "discovery_misspelled" not in registry.names()


def test_a_module_without_its_patch_is_refused_by_name():
    """0.2's module protocol (NAME, GATE, install... as module names) is no declaration any more."""
    module = types.ModuleType("discovery_old_form")
    module.NAME, module.TITLE, module.ISSUE_URL, module.GATE = "discovery_old_form", "t", ISSUE_URL, Gate()
    module.install = lambda ctx: None
    with pytest.raises(TypeError, match="discovery_old_form declares no PATCH"):
        tf_patches.register(module)
    assert "discovery_old_form" not in registry.names()


def test_a_patch_registers_without_a_module():
    patch = _patch(_library(), name="discovery_bare").PATCH
    try:
        assert tf_patches.register(patch) is patch and registry.by_name("discovery_bare") is patch
    finally:
        tf_patches.unregister("discovery_bare")


# What 0.2's module protocol named: in a module that declares PATCH, such a name is read by nothing.
OLD_NAMES = {"TITLE", "ISSUE_URL", "GATE", "OPTIONS", "SIGNATURE", "PROBE", "TRAP", "LIFECYCLE_OPTIONS",
             "LIFECYCLE_NEEDS", "PUBLIC"}


def test_every_built_in_patch_module_declares_its_patch_and_nothing_else():
    for name in registry.PATCH_MODULES:
        module = importlib.import_module(f"tf_patches.patches.{name}")
        assert isinstance(module.PATCH, Patch) and module.PATCH.name == name, name
        assert registry.from_module(module) is module.PATCH
        # a stale declaration beside PATCH would be ignored silently
        assert OLD_NAMES.isdisjoint(vars(module)), (name, sorted(OLD_NAMES.intersection(vars(module))))
    assert [spec.title for spec in registry.specs() if spec.title.endswith("(not loaded)")] == []


def test_a_built_in_module_that_is_refused_fails_alone():
    """Never break the host program: a built-in patch module the registry refuses (or that cannot be
    imported) is a failed row with the reason; apply_all() returns, the other patches apply."""
    result = run_fresh("""
        import json, os, tempfile
        import tf_patches.patches
        folder = tempfile.mkdtemp()
        with open(os.path.join(folder, "misspelled.py"), "w") as module:
            module.write("from tf_patches.core.gate import Gate\\n"
                         "from tf_patches.core.patch import Patch\\n"
                         "PATCH = Patch(name='misspelled', title='t', issue='https://example.invalid', "
                         "gate=Gate(), install=lambda ctx: 'installed', signture=None)\\n")
        tf_patches.patches.__path__.append(folder)  # a real module of the package, refused at its import
        from tf_patches.core import registry
        registry.PATCH_MODULES += ("misspelled", "no_such_module")
        import tf_patches
        report = tf_patches.apply_all()
        rows = {row.name: [row.status, row.reason] for row in report.rows}
        try:
            tf_patches.apply_all(only=["misspelled"], strict=True)
            strict = "returned"
        except tf_patches.TfPatchesError as exc:
            strict = str(exc)
        print(json.dumps({"rows": rows, "strict": strict}))
    """)
    rows = result["rows"]
    assert rows["misspelled"][0] == "failed", rows["misspelled"]
    assert "tf_patches.patches.misspelled" in rows["misspelled"][1] and "signture" in rows["misspelled"][1]
    assert rows["no_such_module"][0] == "failed" and "ModuleNotFoundError" in rows["no_such_module"][1]
    assert rows["seed_kernel_cache"][0] == "pending", rows["seed_kernel_cache"]  # the others: as always
    assert "signture" in result["strict"], result["strict"]


def test_every_patch_module_is_registered_and_every_registered_name_is_a_module():
    """A new patch module whose name was not added to PATCH_MODULES would never apply, silently:
    the modules of tf_patches/patches/ (helpers start with _) and the registered names agree."""
    folder = ROOT / "tf_patches" / "patches"
    modules = sorted(path.stem for path in folder.glob("*.py") if not path.stem.startswith("_"))
    assert sorted(registry.PATCH_MODULES) == modules
