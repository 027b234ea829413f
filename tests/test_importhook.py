"""tf_patches.core.importhook: before- and after-import hooks on real imports of small generated modules."""

from __future__ import annotations

import importlib
import sys

import pytest

from tf_patches.core import importhook

from .fresh import run_fresh


@pytest.fixture
def make_module(tmp_path, monkeypatch):
    """Write a module (it records, at import, whether a before-hook ran) and put it on sys.path."""
    monkeypatch.syspath_prepend(str(tmp_path))
    made = []

    def make(name, body="import builtins\nSAW_BEFORE = getattr(builtins, '_hook_ran', False)\n"):
        (tmp_path / f"{name}.py").write_text(body)
        importlib.invalidate_caches()
        made.append(name)
        return name

    yield make
    for name in made:
        sys.modules.pop(name, None)
        for table in (importhook._before, importhook._after):
            table.pop(name, None)


def test_before_hook_runs_before_the_module_code_and_once(make_module, monkeypatch):
    import builtins

    name = make_module("hooked_before")
    calls = []

    def hook():
        calls.append(1)
        monkeypatch.setattr(builtins, "_hook_ran", True, raising=False)

    importhook.before_import([name, "some_other_name"], hook)
    module = importlib.import_module(name)
    assert module.SAW_BEFORE is True
    assert calls == [1]
    sys.modules.pop(name)
    importlib.import_module(name)  # a second import, and the other name, run nothing more
    assert calls == [1]
    assert not importhook._before.get("some_other_name")  # the other name's entry is spent too


def test_after_hook_gets_the_finished_module_which_keeps_its_own_loader(make_module):
    name = make_module("hooked_after", "VALUE = 42\n")
    seen = []
    importhook.after_import(name, lambda module: seen.append((module.VALUE, module.__loader__)))
    module = importlib.import_module(name)
    assert seen and seen[0][0] == 42
    assert type(module.__loader__).__name__ == "SourceFileLoader"
    assert type(module.__spec__.loader).__name__ == "SourceFileLoader"
    assert seen[0][1] is module.__loader__  # the hook already saw the real loader


def test_an_after_hook_registered_by_a_before_hook_runs_for_that_same_import(make_module):
    name = make_module("hooked_both", "VALUE = 7\n")
    seen = []
    importhook.before_import([name], lambda: importhook.after_import(name, lambda m: seen.append(m.VALUE)))
    importlib.import_module(name)
    assert seen == [7]


def test_hooks_on_an_imported_module_run_at_once(make_module):
    name = make_module("already_there", "VALUE = 1\n")
    importlib.import_module(name)
    seen = []
    importhook.before_import([name], lambda: seen.append("before"))
    importhook.after_import(name, lambda m: seen.append(m.VALUE))
    assert seen == ["before", 1]


def test_a_failing_hook_reaches_the_importer_and_cancel_forgets_a_hook(make_module):
    name = make_module("hooked_failing")

    def fail(module):
        raise RuntimeError("strict")

    importhook.after_import(name, fail)
    with pytest.raises(RuntimeError, match="strict"):
        importlib.import_module(name)
    sys.modules.pop(name, None)
    other = make_module("hooked_cancelled")
    importhook.after_import(other, fail)
    importhook.cancel(other, fail)
    importlib.import_module(other)  # no error: the hook was forgotten


def test_unhooked_imports_go_their_usual_way():
    """The finder answers None for every other module, so the import system is unchanged; and a
    package with data files (found through its loader) imports as before."""
    result = run_fresh("""
        import json, sys
        from tf_patches.core import importhook
        importhook.after_import("json.tool", lambda m: None)
        import email.mime.text, json.tool
        finders = [type(f).__name__ for f in sys.meta_path]
        print(json.dumps({"finders": finders, "loader": type(json.tool.__loader__).__name__}))
    """)
    assert result["finders"][0] == "_Finder"
    assert result["loader"] == "SourceFileLoader"


def test_when_loaded_runs_now_or_once_a_package_still_importing_loads_it(make_module, tmp_path, caplog):
    """A module loaded: the hook runs now, and what it raises reaches the caller. A package still
    importing (the hook asked for from inside its own import): the hook waits for the first of the
    names not imported yet; there, a failure is a warning, never the user's failed import."""
    import logging

    loaded = make_module("loaded_already", "VALUE = 1\n")
    importlib.import_module(loaded)
    seen = []
    assert importhook.when_loaded([loaded], lambda module: seen.append(module.VALUE), "test") is None
    assert seen == [1]
    with pytest.raises(KeyError):
        importhook.when_loaded([loaded], lambda module: {}["boom"], "test")

    for package, hook in (("waiting_package", "SEEN.append(module.__name__)"), ("failing_package", "{}['boom']"),
                          ("itself_package", "SEEN.append(module.__name__)")):
        names = "[__name__]" if package == "itself_package" else "[__name__, __name__ + '.sub']"
        (tmp_path / package).mkdir()
        (tmp_path / package / "sub.py").write_text("VALUE = 2\n")
        (tmp_path / package / "__init__.py").write_text(
            "from tf_patches.core import importhook\n"
            "SEEN = []\n"
            "def hook(module):\n"
            f"    {hook}\n"
            f"CANCEL = importhook.when_loaded({names}, hook, 'the test hook')\n"
            "from . import sub\n")
        importlib.invalidate_caches()
        try:
            with caplog.at_level(logging.WARNING, logger="tf_patches"):
                module = importlib.import_module(package)  # a failing hook does not fail the import
            if package == "itself_package":  # only itself, still importing: nothing to wait for
                assert module.CANCEL is None and module.SEEN == ["itself_package"]
                continue
            assert module.CANCEL is not None
            if package == "waiting_package":
                assert module.SEEN == ["waiting_package.sub"]
            else:
                assert "the test hook failed once failing_package.sub loaded (KeyError: 'boom')" in caplog.text
        finally:
            for name in (package, package + ".sub"):
                sys.modules.pop(name, None)
                importhook._after.pop(name, None)
