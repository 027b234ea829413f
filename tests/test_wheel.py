"""The installed wheel, as a user gets it: ``python -m build`` makes the sdist and, from it, the wheel;
the wheel is installed into TF_PATCHES_WHEEL_VENV (scripts/dev.sh test: .venv-wheel, tensorflow-cpu
and no tf-patches of its own), and every check runs that venv's programs outside the checkout.
This process (the editable venv) only drives them: nothing is installed into it."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from tf_patches import __version__

from .fresh import ROOT, fresh_env

VENV = os.environ.get("TF_PATCHES_WHEEL_VENV")
if not VENV:
    pytest.skip("TF_PATCHES_WHEEL_VENV is not set: scripts/dev.sh test sets it (a venv with TF and "
                "no tf-patches, where the wheel is installed)", allow_module_level=True)

PTH = "tf_patches_auto.pth"
CHECKOUT_MODULES = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tf_patches").rglob("*.py"))
PACKAGE_DATA = ["tf_patches/session/bootstrap/" + PTH]


class Venv:
    def __init__(self, root: Path, cwd: Path):
        self.root = (ROOT / root).resolve()
        self.python = str(self.root / "bin" / "python")
        self.cwd = cwd  # not the checkout: its tf_patches must not be importable from here

    def run(self, args: List[str], env: Optional[Dict[str, Optional[str]]] = None,
            check: bool = True) -> subprocess.CompletedProcess:
        full_env = fresh_env({"PYTHONPATH": None, **(env or {})})
        proc = subprocess.run(args, env=full_env, cwd=str(self.cwd), capture_output=True, text=True, timeout=600)
        assert not check or proc.returncode == 0, f"{args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        return proc

    def python_json(self, code: str, env: Optional[Dict[str, Optional[str]]] = None):
        return json.loads(self.run([self.python, "-c", code], env).stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """The sdist and the wheel built from it, by the wheel venv's `build` (isolated, as PyPI's)."""
    out = tmp_path_factory.mktemp("dist")
    venv = Venv(Path(VENV), out)
    venv.run([venv.python, "-m", "build", "--outdir", str(out), str(ROOT)])
    return out


@pytest.fixture(scope="module")
def venv(dist, tmp_path_factory) -> Venv:
    """The wheel venv with only this wheel of tf-patches in it (any earlier one uninstalled first)."""
    venv = Venv(Path(VENV), tmp_path_factory.mktemp("elsewhere"))
    venv.run([venv.python, "-m", "pip", "uninstall", "-q", "-y", "tf-patches"])
    absent = venv.run([venv.python, "-c", "import tf_patches"], check=False)
    assert absent.returncode != 0 and "No module named 'tf_patches'" in absent.stderr, absent.stderr
    venv.run([venv.python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(_one(dist, "*.whl"))])
    return venv


def _one(folder: Path, pattern: str) -> Path:
    found = list(folder.glob(pattern))
    assert len(found) == 1, found
    return found[0]


def test_the_wheel_holds_every_module_of_the_checkout_and_the_package_data(dist):
    names = zipfile.ZipFile(_one(dist, "*.whl")).namelist()
    assert sorted(name for name in names if name.startswith("tf_patches/") and name.endswith(".py")) == CHECKOUT_MODULES
    assert PTH in names and set(PACKAGE_DATA) <= set(names)


def test_the_sdist_holds_what_the_wheel_is_built_from(dist):
    with tarfile.open(_one(dist, "*.tar.gz")) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert set(CHECKOUT_MODULES + PACKAGE_DATA) <= names
    assert {"setup.py", "setup.cfg", "pyproject.toml", "README.md", "MANIFEST.in", "LICENSE"} <= names
    # What the package and the README cite travels with the source (issue 40).
    assert {"docs/measurements.md", "CHANGELOG.md", "scripts/canary.py", "benchmarks/seed_kernel_cache.py"} <= names
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]


def test_the_sdist_builds_the_checkout_s_package_byte_for_byte(dist):
    """`python -m build` makes the wheel from the sdist (as pip does from PyPI's sdist): each file
    of it is the checkout's own, so nothing the package needs is missing from the sdist or
    changed on the way (its module list is checked above). Compared with the checkout's files, not
    a second build from the checkout, which would reuse a stale build/ folder there."""
    wheel = zipfile.ZipFile(_one(dist, "*.whl"))
    packaged = [name for name in wheel.namelist() if name.startswith("tf_patches/")] + [PTH]
    assert len(packaged) > len(CHECKOUT_MODULES)
    checkout = {name: ROOT / (PACKAGE_DATA[0] if name == PTH else name) for name in packaged}
    differing = [name for name, path in checkout.items() if not path.is_file() or wheel.read(name) != path.read_bytes()]
    assert differing == []


def test_twine_check_passes_for_the_sdist_and_the_wheel(dist):
    """What PyPI's upload checks (metadata, the README rendered as the long description)."""
    venv = Venv(Path(VENV), dist)
    files = [str(_one(dist, "*.tar.gz")), str(_one(dist, "*.whl"))]
    out = venv.run([venv.python, "-m", "twine", "check", "--strict", *files]).stdout
    assert out.count("PASSED") == 2, out


def test_the_version_agrees_with_the_metadata(venv):
    """`tf-patches --version`, `tf_patches.__version__` and the installed distribution's metadata:
    one version (the checkout's), as pip and PyPI will show it."""
    code = "import json, importlib.metadata as m, tf_patches; print(json.dumps([m.version('tf-patches'), tf_patches.__version__]))"
    metadata, module = venv.python_json(code)
    printed = venv.run([str(venv.root / "bin" / "tf-patches"), "--version"]).stdout.split()
    assert metadata == module == __version__ and printed == ["tf-patches", metadata]


def _purelib(venv: Venv) -> Path:
    return Path(venv.python_json("import json, sysconfig; print(json.dumps(sysconfig.get_paths()['purelib']))"))


def test_the_pth_switch_lands_at_the_root_of_site_packages(venv):
    purelib = _purelib(venv)
    assert (purelib / PTH).read_text() == (ROOT / PACKAGE_DATA[0]).read_text()
    where = venv.python_json("import json, tf_patches; print(json.dumps(tf_patches.__file__))")
    assert Path(where) == purelib / "tf_patches" / "__init__.py"  # the wheel's, not the checkout's


def test_import_tf_patches_imports_no_tensorflow(venv):
    code = ("import json, sys, tf_patches; rows = [row.reason for row in tf_patches.report()]; "
            "print(json.dumps(['tensorflow' in sys.modules, rows]))")
    imported, reasons = venv.python_json(code)
    assert imported is False and reasons and all("has not run" in reason for reason in reasons)


@pytest.mark.parametrize("auto", ["1", None])
def test_tf_patches_auto_applies_the_patches_at_import_tensorflow(venv, auto):
    code = """if True:
        import json, sys
        at_start = ["tf_patches.session.bootstrap" in sys.modules, "tensorflow" in sys.modules]
        import tensorflow as tf
        import tf_patches
        print(json.dumps([at_start, tf_patches.report().status("eager_py_function"),
                          tf_patches.is_patched(tf.py_function)]))
    """
    at_start, status, patched = venv.python_json(code, {"TF_PATCHES_AUTO": auto})
    if auto:  # armed by the .pth at start-up, TF not imported then; applied at `import tensorflow`
        assert at_start == [True, False] and status == "applied" and patched is True
    else:
        assert at_start == [False, False] and status == "skipped" and patched is False


# What an interpreter imports at start-up with the bootstrap armed, over what `python -c pass` does
# (issue 31: 0.3.0.dev0 imported typing, re, enum… in every interpreter of an auto-patched tree).
BOOTSTRAP_MODULES = ["sitecustomize", "tf_patches", "tf_patches._version", "tf_patches.core",
                     "tf_patches.core.importhook", "tf_patches.session", "tf_patches.session.bootstrap"]


def test_the_bootstrap_imports_only_its_own_small_modules_at_start_up(venv):
    """Whole fresh interpreters of the installed wheel: with the switch off (unset, empty, 0, off)
    the .pth line imports nothing; armed (TF_PATCHES_AUTO=1, or `tf-patches run`'s PYTHONPATH) it
    adds the bootstrap's own modules and nothing that plain Python does not import already."""
    code = "import sys; print(' '.join(sorted(sys.modules)))"  # sys is built in: nothing imported to look

    def started(env: Dict[str, Optional[str]]) -> List[str]:
        return venv.run([venv.python, "-c", code], env).stdout.split()

    plain = started({"TF_PATCHES_AUTO": None})
    assert "typing" not in plain and "tf_patches" not in plain  # else this check would be blind
    for off in ("", "0", "off", " False "):
        assert started({"TF_PATCHES_AUTO": off}) == plain, off
    folder = str(_purelib(venv) / "tf_patches" / "session" / "bootstrap")
    for armed in ({"TF_PATCHES_AUTO": "1"}, {"PYTHONPATH": folder}):
        modules = started(armed)
        assert [name for name in plain if name not in modules] == [], armed
        assert sorted(set(modules) - set(plain)) == BOOTSTRAP_MODULES, armed


def test_the_console_script_and_tf_patches_run(venv):
    script = str(venv.root / "bin" / "tf-patches")
    assert venv.run([script, "--version"]).stdout.split() == ["tf-patches", __version__]
    data = json.loads(venv.run([script, "report", "--json"]).stdout)
    tf_version = venv.python_json("import json, importlib.metadata as m; print(json.dumps(m.version('tensorflow-cpu')))")
    assert data["environment"]["version"] == tf_version and data["environment"]["tensorflow_installed"] is True
    assert {row["name"]: row["status"] for row in data["patches"]}["seed_kernel_cache"] == "applied"
    # `tf-patches run` puts the installed bootstrap folder first: its sitecustomize starts the command
    code = "import sys; print(sys.modules['sitecustomize'].__file__)"
    started = venv.run([script, "run", "--", venv.python, "-c", code]).stdout.strip()
    assert Path(started) == _purelib(venv) / "tf_patches" / "session" / "bootstrap" / "sitecustomize.py"


def test_the_pytest_plugin_is_registered_and_pytest_loads_it(venv):
    code = """if True:
        import json
        from importlib import metadata
        found = metadata.entry_points()
        group = found.select(group="pytest11") if hasattr(found, "select") else found.get("pytest11", ())
        print(json.dumps({entry.name: entry.value for entry in group}))
    """
    assert venv.python_json(code).get("tf_patches") == "tf_patches.testing.pytest_plugin"
    markers = venv.run([venv.python, "-m", "pytest", "--markers", "-p", "no:cacheprovider"]).stdout
    assert "@pytest.mark.no_leak(" in markers and "@pytest.mark.reproducible(" in markers
