"""Auto-apply for a process tree, in real subprocesses on real TensorFlow: ``tf-patches run``
(bootstrap ``sitecustomize`` on ``PYTHONPATH``), the ``TF_PATCHES_AUTO`` .pth switch, and
``--malloc``. Programs here never call ``apply_all()`` themselves: the point is code users don't own."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

import pytest

from tf_patches.session import allocator
from tf_patches.session.bootstrap import DIRECTORY as BOOTSTRAP_DIRECTORY
from tf_patches.core import options

from .fresh import ROOT, fresh_env

PYTHON = sys.executable
RUN = [PYTHON, "-m", "tf_patches", "run"]
PTH = Path(BOOTSTRAP_DIRECTORY) / "tf_patches_auto.pth"
SEED = "seed_kernel_cache"

# A user's own sitecustomize: records each interpreter start it runs in (its argv).
USER_SITECUSTOMIZE = """
    import json, os, sys
    with open(os.environ["MARKER"], "a") as marker:
        marker.write(json.dumps(sys.argv) + "\\n")
"""

# TF issue 36164's loop (see test_seed_kernel_cache.py: ≈100 MiB unpatched, < 2 MiB patched), then,
# with --spawn, the patch report of a multiprocessing spawn worker that imports TensorFlow.
SCRIPT = """
    import json, multiprocessing, sys

    def worker_report():
        import tensorflow  # noqa: F401
        import tf_patches
        return {row.name: row.status for row in tf_patches.report()}

    from tf_patches.testing import rss_bytes

    if __name__ == "__main__":
        import tensorflow as tf
        import tf_patches  # only to read the report: this program applies nothing itself
        tf.random.set_seed(1234)
        for _ in range(300):  # warm-up: allocator pools, first kernels
            tf.random.uniform([]).numpy()
        start = (rss_bytes() / 2**20)
        for _ in range(3000):
            tf.random.uniform([]).numpy()
        result = {"growth_mib": (rss_bytes() / 2**20) - start, "status": tf_patches.report().status("seed_kernel_cache")}
        if "--spawn" in sys.argv:
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                result["worker"] = pool.apply(worker_report)
        print(json.dumps(result))
"""


def _write(path: Path, code: str) -> Path:
    path.write_text(textwrap.dedent(code))
    return path


def _run(args: List[str], env: Optional[Dict[str, Optional[str]]] = None,
         timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=fresh_env(env), capture_output=True, text=True, timeout=timeout,
                          cwd=str(ROOT))


def _json(proc: subprocess.CompletedProcess):
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _markers(path: Path) -> List[List[str]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="module")
def leak_loop(tmp_path_factory):
    """The same script with and without the wrapper, side by side (RSS is per process); the user's
    sitecustomize is on PYTHONPATH in both."""
    tmp = tmp_path_factory.mktemp("autoapply")
    user_dir = tmp / "user"
    user_dir.mkdir()
    _write(user_dir / "sitecustomize.py", USER_SITECUSTOMIZE)
    script = str(_write(tmp / "script.py", SCRIPT))
    pythonpath = f"{user_dir}:{ROOT}"
    runs = {
        "wrapped": RUN + ["--only", SEED, "--", PYTHON, script, "--spawn"],
        "bare": [PYTHON, script],
    }

    def measure(name):
        env = {"PYTHONPATH": pythonpath, "MARKER": str(tmp / f"{name}.marker")}
        return name, _json(_run(runs[name], env))

    with ThreadPoolExecutor(2) as pool:
        results = dict(pool.map(measure, runs))
    results["wrapped_markers"] = _markers(tmp / "wrapped.marker")
    results["script"] = script
    return results


def test_run_wrapper_ends_the_leak_of_an_unchanged_script(leak_loop):
    bare, wrapped = leak_loop["bare"], leak_loop["wrapped"]
    assert bare["status"] == "skipped" and bare["growth_mib"] > 50, f"the bare script should leak: {bare}"
    assert wrapped["status"] == "applied"
    assert wrapped["growth_mib"] < 2, f"wrapped script grew: {wrapped} (bare {bare})"


def test_spawned_worker_applies_the_patches_with_the_options_passed_down(leak_loop):
    worker = leak_loop["wrapped"]["worker"]
    assert worker[SEED] == "applied"
    assert all(status == "skipped" for name, status in worker.items() if name != SEED), worker  # --only


def test_users_own_sitecustomize_still_runs_under_the_wrapper(leak_loop):
    starts = leak_loop["wrapped_markers"]
    assert [leak_loop["script"], "--spawn"] in starts, starts
    assert any("--multiprocessing-fork" in argv for argv in starts), starts


def test_strict_start_up_failure_raises_at_import_tensorflow_and_nowhere_else(tmp_path):
    """Strict mode, and only a patch that this machine (described as TF 1.15) cannot take: the
    bootstrap waits for `import tensorflow`, which raises TfPatchesError there, as asked; the rest
    of the program keeps its output and exit status."""
    machine = tmp_path / "tf1.json"
    machine.write_text(json.dumps({"distribution": "tensorflow", "version": "1.15.5"}))
    script = _write(tmp_path / "script.py", """
        import sys
        print("own output")
        try:
            import tensorflow
        except Exception as exc:
            print(type(exc).__name__, "1.15.5" in str(exc))
        print("own warning", file=sys.stderr)
        sys.exit(3)
    """)
    proc = _run(RUN + ["--strict", "--only", SEED, "--", PYTHON, str(script)],
                {"TF_PATCHES_ASSUME": str(machine)})
    assert (proc.returncode, proc.stdout) == (3, "own output\nTfPatchesError True\n"), proc.stderr
    assert proc.stderr.splitlines() == ["own warning"]


def test_a_bootstrap_that_cannot_import_tf_patches_says_so_and_the_program_runs(tmp_path):
    """The bootstrap folder on PYTHONPATH, tf_patches itself shadowed by a broken copy (another
    environment's, say): one line on stderr, then the program's own output and exit status."""
    broken = tmp_path / "tf_patches"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('another environment')\n")
    env = fresh_env({"PYTHONPATH": f"{BOOTSTRAP_DIRECTORY}:{tmp_path}"})
    proc = subprocess.run([PYTHON, "-c", "print('own output'); raise SystemExit(4)"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (4, "own output\n")
    assert proc.stderr.splitlines() == [
        "tf-patches: patches not armed at start-up, the program runs unpatched: ImportError: another environment"]


def test_a_failing_user_sitecustomize_is_reported_once_per_process_and_the_patches_still_apply(tmp_path):
    """The wrapper's own interpreter runs it too (the user's PYTHONPATH is its own): Python says so
    there, and the command exec'd in the same process says nothing more; a child says it again."""
    user_dir = tmp_path / "user"
    user_dir.mkdir()
    _write(user_dir / "sitecustomize.py", "import a_module_that_is_not_installed\n")
    code = ("import subprocess, sys, tf_patches; subprocess.run([sys.executable, '-c', 'pass']); "
            "print(tf_patches.report().status('seed_kernel_cache'))")
    proc = _run(RUN + ["--", PYTHON, "-c", code], {"PYTHONPATH": f"{user_dir}:{ROOT}"})
    assert (proc.returncode, proc.stdout) == (0, "pending\n"), proc.stderr
    error = "ModuleNotFoundError: No module named 'a_module_that_is_not_installed'"
    reports = [line for line in proc.stderr.splitlines() if "a_module_that_is_not_installed" in line]
    assert reports == [error, f"tf-patches: error in your sitecustomize (run by tf-patches' bootstrap): {error}"], \
        proc.stderr


def installed(name: str) -> str:
    """The allocator's library, or a skip that says why: scripts/dev.sh test installs both with
    apt-get where it runs as root, and these tests are skipped (-rs prints the reason) elsewhere."""
    try:
        return allocator.find(name)
    except allocator.AllocatorNotFound as exc:
        pytest.skip(f"the --malloc tests need the allocator installed (scripts/dev.sh test installs it "
                    f"with apt-get when run as root): {exc}")


@pytest.mark.parametrize("name", sorted(allocator.ALLOCATORS))
def test_malloc_preloads_the_allocator_in_the_command(name):
    library = installed(name)
    code = ("from tf_patches.cli import main; print(open('/proc/self/maps').read()); "
            "main(['report', '--no-import'])")
    preloaded = _run(RUN + ["--malloc", name, "--", PYTHON, "-c", code], {"LD_PRELOAD": None})
    assert preloaded.returncode == 0, preloaded.stderr
    assert Path(library).resolve().name in preloaded.stdout  # mapped: /proc/self/maps shows the file
    assert f"allocator: {name} (" in preloaded.stdout
    plain = _run([PYTHON, "-c", code], {"LD_PRELOAD": None})
    assert "allocator: the C library's malloc" in plain.stdout, plain.stderr


def test_malloc_preloads_only_an_absolute_path_of_one_piece(tmp_path, monkeypatch):
    """LD_LIBRARY_PATH entries that are relative (each process of the tree would look from its own
    working directory) or hold a space (LD_PRELOAD would split the path in two) are passed over,
    though they hold the library."""
    library = installed("tcmalloc")
    for folder in ("lib", "my libs"):
        (tmp_path / folder).mkdir()
        shutil.copy(library, tmp_path / folder / Path(library).name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LD_LIBRARY_PATH", f"lib:{tmp_path / 'my libs'}")
    assert allocator.find("tcmalloc") == library


@pytest.mark.parametrize("name", sorted(allocator.ALLOCATORS))
def test_malloc_without_the_library_fails_before_the_command_starts(tmp_path, name):
    """A machine without the library, as far as the search can tell: it looks in an empty folder."""
    started = tmp_path / "started"
    code = textwrap.dedent(f"""
        import sys
        from tf_patches import cli
        from tf_patches.session import allocator
        allocator.search_dirs = lambda: [{str(tmp_path)!r}]
        sys.exit(cli.main(["run", "--malloc", {name!r}, "--", sys.executable, "-c",
                           "open({str(started)!r}, 'w')"]))
    """)
    proc = _run([PYTHON, "-c", code])
    assert proc.returncode == 125 and not started.exists(), proc.stderr
    package = {"tcmalloc": "libtcmalloc-minimal4", "jemalloc": "libjemalloc2"}[name]
    assert f"{name} is not installed" in proc.stderr and f"apt-get install {package}" in proc.stderr


def test_run_rejects_bad_options_and_missing_commands_before_anything_starts(tmp_path):
    bad_option = _run(RUN + ["--only", "no_such_patch", "--", PYTHON, "-c", "print('started')"])
    assert bad_option.returncode == 2 and "no_such_patch" in bad_option.stderr
    assert "started" not in bad_option.stdout
    missing = _run(RUN + ["--", str(tmp_path / "no-such-command")])
    assert missing.returncode == 127 and "command not found" in missing.stderr


def test_hash_seed_sets_pythonhashseed_for_the_command_and_rejects_what_python_would(tmp_path):
    probe = "import os, sys; print(os.environ.get('PYTHONHASHSEED'), hash('tf-patches'))"
    runs = [_run(RUN + ["--hash-seed", "7", "--", PYTHON, "-c", probe], {"PYTHONHASHSEED": None}) for _ in range(2)]
    assert [run.returncode for run in runs] == [0, 0], runs[0].stderr
    assert runs[0].stdout == runs[1].stdout and runs[0].stdout.startswith("7 ")
    unset = [_run(RUN + ["--", PYTHON, "-c", probe], {"PYTHONHASHSEED": None}).stdout for _ in range(2)]
    assert unset[0] != unset[1] and unset[0].startswith("None ")  # without it, string hashes vary
    for bad in ("-1", "4294967296", "x"):
        result = _run(RUN + ["--hash-seed", bad, "--", PYTHON, "-c", "print('started')"])
        assert result.returncode == 2 and "started" not in result.stdout, (bad, result.stderr)


AUTO_PROBE = "import tf_patches; print(tf_patches.report()['seed_kernel_cache'].reason)"


def _start_with_pth(site_dir: Path, value: Optional[str]) -> subprocess.CompletedProcess:
    """Start Python as it starts with the .pth installed: site runs the .pth files of a site folder,
    then imports sitecustomize (with -S and site.main() so this order holds whatever is installed)."""
    shutil.copy(PTH, site_dir / PTH.name)
    code = f"import site; site.addsitedir({str(site_dir)!r}); site.main(); {AUTO_PROBE}"
    return _run([PYTHON, "-S", "-c", code], {"TF_PATCHES_AUTO": value})


@pytest.mark.parametrize("value, applied", [("1", True), ("yes", True), ("0", False), (None, False)])
def test_tf_patches_auto_pth_line_applies_at_start_only_when_switched_on(tmp_path, value, applied):
    proc = _start_with_pth(tmp_path, value)
    assert proc.returncode == 0, proc.stderr
    assert ("has not run" not in proc.stdout) == applied, proc.stdout


def test_the_pth_line_reads_tf_patches_auto_as_the_options_do(monkeypatch):
    """The .pth line runs in every interpreter: a value that options.flag reads as false imports
    nothing but os (issue 31: "0" is a non-empty string, and imported the package); a true or a bad
    one goes on to the bootstrap (which warns about the bad one)."""
    imported: List[str] = []
    bootstrap = SimpleNamespace(activate_from_environment=lambda: imported.append("activated"))

    def spy(name: str, *args: Any) -> Any:  # the line's own imports, seen and stood in for
        imported.append(name)
        return __import__(name, *args) if name == "os" else SimpleNamespace(session=SimpleNamespace(bootstrap=bootstrap))

    for value in [f" {word.upper()} " for word in options._TRUE + options._FALSE] + ["maybe", "", None]:
        monkeypatch.delenv("TF_PATCHES_AUTO", raising=False)
        if value is not None:
            monkeypatch.setenv("TF_PATCHES_AUTO", value)
        imported.clear()
        exec(PTH.read_text(), {"__builtins__": {"__import__": spy}})
        on = value is not None and value.strip().lower() not in options._FALSE + ("",)  # "" is unset
        assert imported == (["os", "tf_patches.session.bootstrap", "activated"] if on else ["os"]), value


def test_tf_patches_auto_with_a_bad_value_warns_and_applies_nothing(tmp_path):
    proc = _start_with_pth(tmp_path, "maybe")
    assert "has not run" in proc.stdout
    assert "ignoring TF_PATCHES_AUTO='maybe'" in proc.stderr


def test_a_pth_that_hides_the_bootstrap_is_said_in_the_report(tmp_path):
    """Issue 39: a .pth run after ours that puts a folder with its own sitecustomize first on
    sys.path hid the bootstrap silently (TF_PATCHES_AUTO=1 applied nothing). `tf-patches report`
    says it, in its text and its JSON."""
    shutil.copy(PTH, tmp_path / PTH.name)

    def report(*flags: str) -> str:  # `tf-patches report` in an interpreter started with these .pth files
        code = (f"import runpy, site, sys; site.addsitedir({str(tmp_path)!r}); site.main(); "
                f"sys.argv = ['tf-patches', 'report', '--no-import', *{flags!r}]; "
                "runpy.run_module('tf_patches', run_name='__main__')")
        proc = _run([PYTHON, "-S", "-c", code], {"TF_PATCHES_AUTO": "1"})
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    assert json.loads(report("--json"))["environment"]["notes"] == []  # the bootstrap ran: nothing to say
    other = tmp_path / "other"
    other.mkdir()
    _write(other / "sitecustomize.py", "OTHER = True\n")
    (tmp_path / "zz_other.pth").write_text(f"import sys; sys.path.insert(0, {str(other)!r})\n")
    notes = json.loads(report("--json"))["environment"]["notes"]
    assert len(notes) == 1 and "start-up bootstrap did not run" in notes[0], notes
    assert str(other / "sitecustomize.py") in notes[0] and f"note: {notes[0]}" in report()


def test_installed_pth_switches_on_a_plain_interpreter():
    """Where tf-patches is installed (pip install . or -e ., as scripts/dev.sh does), its .pth sits
    in site-packages and TF_PATCHES_AUTO=1 alone applies the patches at start-up."""
    installed = Path(sysconfig.get_paths()["purelib"]) / PTH.name
    if not installed.exists():
        pytest.skip("tf-patches is not installed in this interpreter (run from PYTHONPATH)")
    assert installed.read_text() == PTH.read_text()
    on = _run([PYTHON, "-c", AUTO_PROBE], {"TF_PATCHES_AUTO": "1", "PYTHONPATH": None})
    off = _run([PYTHON, "-c", AUTO_PROBE], {"PYTHONPATH": None})
    assert "has not run" not in on.stdout and "has not run" in off.stdout, (on.stderr, off.stderr)
