"""``tf_patches.Settings``: the one form patch options take inside tf-patches. Made from keywords,
variables or the command line, checked once as ``apply_all`` checks them; written out as
variables, flags or code; merged with the first value kept. And the paths that carry it: a
``testing.repro`` run gets the options' values (not flags that lose them), and a bad variable
under ``-W error`` is the default used, not every patch off."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import pickle
import sys
from pathlib import Path

import pytest

import tf_patches
from tf_patches import Settings
from tf_patches.session import allocator
from tf_patches.session import arguments
from tf_patches.core import options as core_options
from tf_patches.core import settings as core_settings
from tf_patches.core.errors import ConfigWarning

from .fresh import run_fresh

# One value of each built-in option that differs from its default, in no particular order.
GIVEN = {"graph_growth_guard": "finalize", "only": ("op_determinism", "keras_seed"), "strict": True,
         "deterministic": True, "seed": 42, "exclude": ("rfft_guard",), "keras_seed": "follow",
         "rfft_guard": "cpu", "dataset_epoch_repeat": "rerandomize", "seed_kernel_cache": "exact"}


def _parsed(argv):
    parser = argparse.ArgumentParser()
    arguments.add_arguments(parser)
    with contextlib.redirect_stderr(io.StringIO()):
        return parser.parse_args([*argv, "--", "cmd"])


def test_every_option_is_given_above():
    assert set(GIVEN) == {option.name for option in tf_patches.core.registry.all_options()}


def test_keywords_to_variables_to_settings_round_trip():
    settings = Settings.from_kwargs(GIVEN)
    environ = settings.to_environ()
    assert environ["TF_PATCHES_ONLY"] == "op_determinism,keras_seed" and environ["TF_PATCHES_SEED"] == "42"
    assert Settings.from_environ(environ) == settings
    assert core_options.resolve(tf_patches.core.registry.all_options(), {}, environ=environ) == {
        **{option.name: option.default for option in tf_patches.core.registry.all_options()}, **GIVEN}
    # What a variable cannot hold as a flag: False, and no patch at all.
    off = Settings(deterministic="false", only=[], strict=0 == 1)
    assert off.to_environ() == {"TF_PATCHES_DETERMINISTIC": "0", "TF_PATCHES_ONLY": "none", "TF_PATCHES_STRICT": "0"}
    assert Settings.from_environ(off.to_environ()) == off


def test_flags_to_settings_round_trip():
    settings = Settings(**GIVEN, hash_seed="0007", malloc="tcmalloc")
    flags = settings.to_flags()
    assert flags[:4] == ("--graph-growth-guard", "finalize", "--only", "op_determinism,keras_seed")
    assert flags[-4:] == ("--hash-seed", "7", "--malloc", "tcmalloc")
    assert Settings.from_args(_parsed(list(flags))) == settings
    assert Settings.from_args(_parsed(["--seed", "", "--only", " "])) == Settings()  # blank: not given
    assert Settings.from_args(_parsed([])) == Settings() and not Settings()
    assert Settings(deterministic=False, seed=1).to_flags() == ("--seed", "1")  # off by default: no flag
    assert Settings(hash_seed=" random ").to_environ() == {"PYTHONHASHSEED": "random"}


def test_settings_made_as_code_read_back():
    settings = Settings(graph_growth_guard="FINALIZE", only=["rfft_guard"], seed="3", strict=True)
    code = settings.to_code()
    assert code == 'graph_growth_guard="finalize", only=[\'rfft_guard\'], seed=3, strict=True'
    assert eval(f"dict({code})", {}) == {"graph_growth_guard": "finalize", "only": ["rfft_guard"], "seed": 3,
                                         "strict": True}
    assert repr(Settings(seed=1, malloc="jemalloc")) == "Settings(seed=1, malloc='jemalloc')"


def test_merged_keeps_the_first_value_of_each_option_in_order():
    first = Settings(seed=3, only="rfft_guard")
    second = Settings(deterministic=True, seed=0, malloc="tcmalloc")
    merged = first.merged(second)
    assert merged.seed == 3 and merged.deterministic is True and merged.malloc == "tcmalloc"
    assert list(merged) == ["seed", "only", "deterministic", "malloc"]
    assert second.merged(first).seed == 0 and second.merged(first).only == ("rfft_guard",)
    assert first.merged(None, Settings(seed=9), Settings(strict=True)) == Settings(seed=3, only="rfft_guard",
                                                                                     strict=True)
    assert first == Settings(only="rfft_guard", seed=3) and hash(first) == hash(Settings(only="rfft_guard", seed=3))


def test_reading_gives_the_value_or_the_default():
    settings = Settings(seed=5)
    assert settings.seed == 5 and settings.deterministic is False and settings.graph_growth_guard == "warn"
    assert settings.get("deterministic") is None and "seed" in settings and "deterministic" not in settings
    assert settings.malloc is None and settings.hash_seed is None
    with pytest.raises(AttributeError):
        settings.no_such_option
    with pytest.raises(AttributeError, match="frozen"):
        settings.seed = 6
    assert pickle.loads(pickle.dumps(settings)) == settings


@pytest.mark.parametrize("bad, error", [
    ({"seed": -1}, ValueError), ({"seed": 2**32}, ValueError), ({"seed": "0x10"}, ValueError),
    ({"deterministic": "maybe"}, ValueError), ({"deterministic": 2}, TypeError),
    ({"only": "nope"}, ValueError), ({"only": "NONE"}, ValueError), ({"only": [1]}, TypeError),
    ({"graph_growth_guard": "loud"}, ValueError), ({"bogus": 1}, TypeError),
])
def test_a_bad_value_is_refused_as_apply_all_refuses_it(bad, error):
    with pytest.raises(error) as from_settings:
        Settings.from_kwargs(bad)
    with pytest.raises(error) as from_apply_all:
        tf_patches.apply_all(env={}, **bad)
    assert str(from_settings.value) == str(from_apply_all.value)


@pytest.mark.parametrize("bad, error", [({"malloc": "ptmalloc"}, ValueError), ({"malloc": 1}, TypeError),
                                        ({"hash_seed": -1}, ValueError), ({"hash_seed": "x"}, ValueError),
                                        ({"hash_seed": 2**32}, ValueError), ({"hash_seed": 1.5}, TypeError),
                                        ({"hash_seed": "9" * 5000}, ValueError)])
def test_the_run_settings_are_checked_too(bad, error):
    with pytest.raises(error, match=next(iter(bad))):
        Settings(**bad)
    with pytest.raises(TypeError, match="unexpected keyword"):  # no apply_all takes them
        Settings.from_kwargs(bad)


def test_malloc_names_what_the_allocator_module_finds():
    assert core_settings.ALLOCATORS == tuple(sorted(allocator.ALLOCATORS))


def test_a_bad_variable_warns_and_is_not_given(monkeypatch):
    core_options._warned.clear()
    with pytest.warns(ConfigWarning, match="TF_PATCHES_SEED"):
        settings = Settings.from_environ({"TF_PATCHES_SEED": "x", "TF_PATCHES_STRICT": "1"})
    assert settings == Settings(strict=True) and settings.seed is None


def test_runtime_env_takes_settings_and_keywords_win():
    env = tf_patches.ray.runtime_env(Settings(seed=1, only="rfft_guard"), seed=2)["env_vars"]
    assert env["TF_PATCHES_SEED"] == "2" and env["TF_PATCHES_ONLY"] == "rfft_guard"
    with pytest.raises(ValueError, match="malloc"):
        tf_patches.ray.runtime_env(Settings(malloc="tcmalloc"))


# -- what travels to the runs -------------------------------------------------------------------
SEEN = "import os, sys; open(sys.argv[1], 'a').write(repr(__import__('tf_patches').Settings.from_environ()) + '\\n')"


@pytest.mark.parametrize("options, seen", [
    ({"deterministic": "0"}, "Settings(deterministic=False)"),  # a flag could only leave it out
    ({"deterministic": "false", "seed": "0042"}, "Settings(deterministic=False, seed=42)"),
    ({"only": []}, "Settings(only=[], deterministic=True)"),  # no patch, not every patch; the user's own kept
    (Settings(only="none", hash_seed=0), "Settings(only=[], deterministic=True)"),
], ids=["zero", "false", "only-empty", "settings"])
def test_repro_runs_get_the_options_values(options, seen, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("TF_PATCHES_DETERMINISTIC", "1")  # the user's environment: the options must win
    record = tmp_path / "seen"
    report = tf_patches.testing.repro([sys.executable, "-c", SEEN, str(record)], options=options, experiments=0)
    assert report.verdict == "repeatable", str(report)
    assert record.read_text().splitlines() == [seen, seen]


def test_repro_refuses_bad_options_before_any_run(tmp_path: Path):
    record = tmp_path / "seen"
    for bad, error in (({"deterministic": "maybe"}, ValueError), ({"bogus": 1}, TypeError),
                       ({"only": ["nope"]}, ValueError)):
        with pytest.raises(error):
            tf_patches.testing.repro([sys.executable, "-c", SEEN, str(record)], options=bad)
    assert not record.exists()


# A machine no advisory speaks of, so that these cases check the ConfigWarning alone (an advisory
# under -W error is the next test's case).
NO_ADVISORY = '{"version": "2.21.0", "distribution": "tensorflow-cpu", "python_version": "3.12.1"}'


def test_a_bad_variable_under_warnings_as_errors_is_the_default_used():
    # -W error raises the ConfigWarning: apply_all once stopped there and the bootstrap applied
    # nothing at all. The README promises the default is used.
    found = run_fresh("""
        import contextlib, io, json
        import tf_patches
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            report = tf_patches.apply_all()
        print(json.dumps({"rows": {row.name: row.status for row in report.rows},
                          "stderr": stderr.getvalue(), "seed": tf_patches.Settings.from_environ().seed}))
    """, {"PYTHONWARNINGS": "error", "TF_PATCHES_SEED": "x", "TF_PATCHES_GRAPH_GROWTH": "finalize",
          "TF_PATCHES_ASSUME": NO_ADVISORY})
    assert found["rows"]["seed_kernel_cache"] == "pending", found  # applied at `import tensorflow`
    assert found["rows"]["graph_growth_guard"] == "pending", found
    assert found["stderr"].startswith("ConfigWarning: tf-patches: ignoring TF_PATCHES_SEED='x'"), found
    assert found["seed"] is None  # not given: the default


def test_an_advisory_under_warnings_as_errors_stops_no_patch():
    # TF < 2.17 on Python 3.11: py311_eager_op_leak advises. Raised by -W error, its warning once
    # stopped apply_all there, and every patch after it in the registry's order was never decided.
    found = run_fresh("""
        import contextlib, io, json
        import tf_patches
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            rows = {row.name: row.status for row in tf_patches.apply_all().rows}
        print(json.dumps({"rows": rows, "stderr": stderr.getvalue()}))
    """, {"PYTHONWARNINGS": "error",
          "TF_PATCHES_ASSUME": '{"version": "2.16.1", "distribution": "tensorflow-cpu", "python_version": "3.11.7"}'})
    rows = found["rows"]
    assert rows["py311_eager_op_leak"] == "advised", found
    assert list(rows)[-1] != "py311_eager_op_leak" and all(rows.values()), found  # rows after it decided
    assert rows["seed_kernel_cache"] == "pending", found
    assert "AdvisoryWarning: tf-patches:" in found["stderr"], found


def test_a_bad_variable_under_warnings_as_errors_leaves_tf_patches_run_patched(tmp_path: Path):
    # The case: the bootstrap's apply_all stopped at the raised warning, every row skipped.
    import subprocess

    from .fresh import fresh_env

    code = "import json, tf_patches; print(json.dumps({r.name: r.status for r in tf_patches.report().rows}))"
    proc = subprocess.run([sys.executable, "-m", "tf_patches", "run", "--", sys.executable, "-c", code],
                          env=fresh_env({"PYTHONWARNINGS": "error", "TF_PATCHES_SEED": "x",
                                         "TF_PATCHES_ASSUME": NO_ADVISORY}),
                          capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    statuses = json.loads(proc.stdout.splitlines()[-1])
    assert statuses["seed_kernel_cache"] == "pending" and statuses["graph_growth_guard"] == "pending", statuses
    assert "ignoring TF_PATCHES_SEED='x'" in proc.stderr and "not applied" not in proc.stderr, proc.stderr


def test_repro_lays_a_knobs_and_the_causes_fixes_over_the_users_settings():
    from tf_patches.repro import command, experiments
    from tf_patches.repro.model import Cause, ReproReport
    from tf_patches.repro.vocabulary import KNOBS, settings_of

    user = Settings(seed=3, exclude="rfft_guard", hash_seed=5)
    env = command.knob_environment(user, {}, KNOBS["op_determinism"])
    assert (env["TF_PATCHES_DETERMINISTIC"], env["TF_PATCHES_SEED"]) == ("1", "0")  # the knob's seed wins
    assert env["TF_PATCHES_EXCLUDE"] == "rfft_guard" and env["PYTHONHASHSEED"] == "5"  # the user's others stay
    both = experiments._together([KNOBS["hash_seed"], KNOBS["op_determinism"]])
    assert settings_of(both.fix) == Settings(hash_seed=0, deterministic=True, seed=0)
    report = ReproReport.__new__(ReproReport)
    report.causes = [Cause("keras_seed", settings=Settings(keras_seed="follow", seed=1)), Cause("seed_varies"),
                     Cause("tf_seed_unset", settings=settings_of(KNOBS["op_determinism"].fix))]
    names, fix = report.fixes()
    assert names == ["keras_seed", "tf_seed_unset"]
    assert fix.to_flags() == ("--keras-seed", "follow", "--seed", "1", "--deterministic")  # the first seed kept


def settings_seen_by_the_run():
    """check_reproducible's target: fails unless its run got the Settings below as its variables."""
    import os

    import numpy as np

    seen = Settings.from_environ()
    assert (seen.graph_growth_guard, seen.seed, seen.deterministic) == ("finalize", 7, True), seen
    assert os.environ["PYTHONHASHSEED"] == "1"
    return np.arange(3)


def test_check_reproducible_runs_get_its_settings():
    result = tf_patches.testing.check_reproducible(settings_seen_by_the_run, seed=0, timeout=120,
                                                   settings=Settings(graph_growth_guard="finalize", seed=7,
                                                                     hash_seed=1))
    assert result.identical and result.applied == 'apply_all(graph_growth_guard="finalize", seed=7, deterministic=True)'
    with pytest.raises(ValueError, match="malloc"):
        tf_patches.testing.check_reproducible(settings_seen_by_the_run, settings=Settings(malloc="tcmalloc"))
    with pytest.raises(TypeError, match="Settings"):
        tf_patches.testing.check_reproducible(settings_seen_by_the_run, settings={"seed": 1})
