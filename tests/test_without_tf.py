"""tf-patches where TensorFlow is not installed: every module imports, apply_all/report/revert say
so, the command line and the TF_PATCHES_AUTO bootstrap work. scripts/dev.sh runs this file on the
oldest Python that setup.cfg claims (3.8), in a venv without TF (its NO_TF_TESTS); elsewhere it runs
in a venv of this interpreter without TF, made here (no module hidden, none faked)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from tf_patches import __version__, cli
from tf_patches.session.bootstrap import DIRECTORY as BOOTSTRAP_DIRECTORY

from .fresh import ROOT, fresh_env

NOT_INSTALLED = "TensorFlow is not installed"
# What tf_patches imports besides the standard library: packaging, and pytest for the plugin module.
DEPENDENCIES = ("packaging", "pytest")


@pytest.fixture(scope="module")
def bare(tmp_path_factory) -> Tuple[str, Dict[str, str]]:
    """(python, env): this interpreter if it has no TensorFlow, else a venv of it without TF whose
    PYTHONPATH holds the checkout and our dependencies (linked)."""
    env = fresh_env({"PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"})
    if importlib.util.find_spec("tensorflow") is None:
        return sys.executable, env
    root = tmp_path_factory.mktemp("bare")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    deps = root / "deps"
    deps.mkdir()
    for source in _installed_files(DEPENDENCIES):
        os.symlink(source, deps / source.name)
    env["PYTHONPATH"] = f"{deps}{os.pathsep}{ROOT}"
    return str(root / "venv" / "bin" / "python"), env


def _installed_files(names: Tuple[str, ...]) -> set:
    """The top-level modules and packages of these distributions and of those they require here."""
    from importlib import metadata

    from packaging.requirements import Requirement

    seen, tops, todo = set(), set(), list(names)
    while todo:
        dist = metadata.distribution(todo.pop())
        if dist.metadata["Name"].lower() in seen:
            continue
        seen.add(dist.metadata["Name"].lower())
        for file in dist.files or ():
            if not file.parts[0].endswith((".dist-info", ".egg-info", ".pth")) and file.parts[0] not in ("..", "__pycache__"):
                tops.add(Path(dist.locate_file(file.parts[0])))
        requires = [Requirement(line) for line in dist.requires or ()]
        todo += [r.name for r in requires if r.marker is None or r.marker.evaluate({"extra": ""})]
    return tops


def _run(bare, args: List[str], env: Dict[str, str] = None, cwd: str = None) -> subprocess.CompletedProcess:
    python, base = bare
    proc = subprocess.run([python, *args], env={**base, **(env or {})}, capture_output=True, text=True,
                          timeout=120, cwd=cwd or str(ROOT))
    assert proc.returncode == 0, proc.stderr
    return proc


def test_the_interpreter_has_no_tensorflow(bare):
    code = "import importlib.util; print(importlib.util.find_spec('tensorflow') is None)"
    assert _run(bare, ["-c", code]).stdout.split() == ["True"]


def test_every_module_and_public_name_imports(bare):
    code = """if True:
        import importlib, json, pkgutil, sys, warnings
        warnings.simplefilter("ignore", DeprecationWarning)  # the 0.2 paths say they moved
        import tf_patches
        failed = {}
        names = [m.name for m in pkgutil.walk_packages(tf_patches.__path__, "tf_patches.")]
        for name in names:
            if not name.endswith("__main__"):  # the command line itself, run below
                try:
                    importlib.import_module(name)
                except Exception as exc:
                    failed[name] = repr(exc)
        for name in tf_patches.__all__ + ["ray"]:
            try:
                getattr(tf_patches, name)
            except Exception as exc:
                failed["tf_patches." + name] = repr(exc)
        print(json.dumps([sorted(names), failed]))
    """
    names, failed = json.loads(_run(bare, ["-c", code]).stdout)
    assert failed == {}
    on_disk = {".".join(path.relative_to(ROOT).with_suffix("").parts).replace(".__init__", "")
               for path in (ROOT / "tf_patches").rglob("*.py")}
    assert set(names) == on_disk - {"tf_patches"}  # every module was found, so every one was imported


def test_apply_all_report_and_revert_say_tensorflow_is_not_installed(bare):
    code = """if True:
        import json, sys, tf_patches
        before = [row.reason for row in tf_patches.report()]
        applied = tf_patches.apply_all()
        text = str(tf_patches.report())
        tf_patches.revert_all()
        print(json.dumps([before, [(row.status, row.reason) for row in applied], text,
                          tf_patches.detect().tensorflow_installed, "tensorflow" in sys.modules]))
    """
    before, rows, text, installed, imported = json.loads(_run(bare, ["-c", code]).stdout)
    assert before and all("has not run" in reason for reason in before)
    assert rows and all(row == ["skipped", NOT_INSTALLED] for row in rows)
    assert "TensorFlow not installed" in text and installed is False and imported is False


def test_the_command_line(bare):
    version = _run(bare, ["-m", "tf_patches", "--version"]).stdout
    assert version.split() == ["tf-patches", __version__]
    text = _run(bare, ["-m", "tf_patches", "report", "--no-import"]).stdout
    assert "TensorFlow not installed" in text and NOT_INSTALLED in text
    data = json.loads(_run(bare, ["-m", "tf_patches", "report", "--json"]).stdout)
    assert data["environment"]["tensorflow_installed"] is False
    python = _run(bare, ["-c", "import platform; print(platform.python_version())"]).stdout.strip()
    assert data["environment"]["python_version"] == python
    assert {row["status"] for row in data["patches"]} == {"skipped"}
    for command in ["report", *cli.COMMANDS]:  # every option's help text reaches the user
        text = _run(bare, ["-m", "tf_patches", command, "--help"]).stdout
        assert text.startswith("usage: tf-patches " + command), text


def test_tf_patches_run_and_diagnose_run_a_python_command(bare):
    python = bare[0]
    code = "import sys; print(type(sys.modules['sitecustomize']).__name__, sys.modules['sitecustomize'].__file__)"
    ran = _run(bare, ["-m", "tf_patches", "run", "--", python, "-c", code])
    assert ran.stdout.split() == ["module", str(Path(BOOTSTRAP_DIRECTORY) / "sitecustomize.py")]
    assert "tf-patches:" not in ran.stderr, ran.stderr  # nothing failed at start-up
    diagnosed = _run(bare, ["-m", "tf_patches", "diagnose", "--json", "--", python, "-c", "print('ran')"])
    lines = diagnosed.stdout.splitlines()
    assert lines[0] == "ran" and json.loads(lines[-1])["exit_status"] == 0
    assert "no process imported TensorFlow" in diagnosed.stderr


@pytest.mark.parametrize("value, armed", [("1", True), (None, False)])
def test_the_pth_switch_arms_the_bootstrap(bare, tmp_path, value, armed):
    """Python as it starts with the .pth in site-packages: site runs it, then imports sitecustomize
    (-S and site.main(), so that this order holds whatever the interpreter has installed)."""
    shutil.copy(Path(BOOTSTRAP_DIRECTORY) / "tf_patches_auto.pth", tmp_path)
    code = (f"import site; site.addsitedir({str(tmp_path)!r}); site.main(); import tf_patches; "
            "print(tf_patches.report()['seed_kernel_cache'].reason)")
    env = {"TF_PATCHES_AUTO": value} if value else {}
    proc = _run(bare, ["-S", "-c", code], env)
    # armed: report() ran the deferred apply_all(); not armed: nothing has run
    assert proc.stdout.strip() == (NOT_INSTALLED if armed else "apply_all() has not run"), proc.stderr
    assert proc.stderr == ""


def test_the_matrix_runs_the_oldest_python_that_setup_cfg_claims():
    """scripts/dev.sh's OLDEST_PY (this file's leg) follows python_requires, so a raised floor moves the leg."""
    claimed = re.search(r"^python_requires\s*=\s*>=\s*(\S+)", (ROOT / "setup.cfg").read_text(), re.M)
    leg = re.search(r"^OLDEST_PY=(\S+)", (ROOT / "scripts" / "dev.sh").read_text(), re.M)
    assert claimed and leg and claimed.group(1) == leg.group(1)
