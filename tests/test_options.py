"""Options and hostile input: one converter per option validates the keyword, the
``TF_PATCHES_*`` variable and the ``tf-patches run`` flag alike; an assume-file or a version of
any shape never raises, blocks or eats stdin. Mostly in this process, fuzzed with hypothesis."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tf_patches
from tf_patches import demo
from tf_patches.session import arguments
from tf_patches.session.command import EXIT_NOT_FOUND
from tf_patches.core import options
from tf_patches.core import registry
from tf_patches.cli import main
from tf_patches.core.environment import MAX_JSON_BYTES, Environment
from tf_patches.core.errors import ConfigWarning
from tf_patches.core.seeds import MAX_SEED
from tf_patches.core.reporting import Report, Row

from .fresh import ROOT, fresh_env, run_fresh

NOT_INSTALLED: dict = {}  # a machine without TensorFlow: apply_all decides everything, installs nothing
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _keyword(option, value):
    """(value, None) or (None, the exception) for ``value`` given as a keyword."""
    try:
        return options.resolve([option], {option.name: value}, environ={})[option.name], None
    except (TypeError, ValueError) as exc:
        return None, exc


def _variable(option, text):
    """(value, ConfigWarning messages) for ``text`` given as the option's variable."""
    options._warned.clear()  # warn_config says each bad value once per process
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = options.resolve([option], {}, environ={option.env_var: text})[option.name]
    return value, [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]


def _flag(option, text):
    """The value ``tf-patches run --<option>=text`` gives (its Settings), or None when it exits 2."""
    parser = argparse.ArgumentParser()
    arguments.add_arguments(parser)
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            args = parser.parse_args([f"--{option.name.replace('_', '-')}={text}", "--", "cmd"])
        except SystemExit as exc:
            assert exc.code == 2
            return None
    return tf_patches.Settings.from_args(args).get(option.name, "")


texts = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", " ", "none", "NONE", ",", "warn", "CPU", "finalize", "off", "0042", "4294967295",
                     "4294967296", "-1", "0x10", "1_000", "\u0664\u0662", "+5", " 7 ", "1e3", "seed_kernel_cache",
                     "seed_kernel_cache,rfft_guard", "none,rfft_guard"]),
    st.from_regex(r"\s*[0-9]{1,12}\s*", fullmatch=True),
    st.text(alphabet="0123456789", min_size=4000, max_size=6000),
)


@FUZZ
@given(option=st.sampled_from(registry.all_options()), text=texts)
def test_keyword_variable_and_run_flag_accept_and_reject_the_same_text(option, text):
    value, error = _keyword(option, text)
    from_variable, warned = _variable(option, text)
    valued = option.convert is not options.flag  # a boolean's run flag takes no text
    flagged = _flag(option, text) if valued else None
    if error is None:  # accepted (blank text is unset: the default) everywhere, with the same value
        assert from_variable == value and warned == []
        assert flagged == ("" if options.unset(text) else value) or not valued
    else:  # rejected everywhere: the keyword raises naming the option, the variable warns once
        assert str(error).startswith(f"{option.name}: ")
        assert from_variable == option.default
        assert len(warned) == 1 and option.env_var in warned[0], warned
        assert flagged is None
    assert all(len(message) < 1000 for message in warned)  # a 6,000-digit value is quoted briefly


@pytest.mark.parametrize("text, seed", [("0", 0), ("0042", 42), (" 7 ", 7), ("4294967295", MAX_SEED),
                                        ("0" * 5000 + "9", 9)])
def test_seed_text_is_ascii_decimal_digits(text, seed):
    assert _keyword(SEED_OPTION, text) == (seed, None)


@pytest.mark.parametrize("text", ["-1", "+5", "0x10", "1_000", "\u0664\u0662", "\uff14\uff12", "1e3", "4294967296",
                                  "9" * 5000, "4.0"])
def test_seed_text_in_other_notations_or_out_of_range_is_refused(text):
    value, error = _keyword(SEED_OPTION, text)
    assert isinstance(error, ValueError) and f"0 to {MAX_SEED}" in str(error)


SEED_OPTION = next(option for option in registry.all_options() if option.name == "seed")


@FUZZ
@given(seed=st.one_of(st.integers(min_value=-(2**70), max_value=2**70),
                      st.integers(min_value=0, max_value=2**64 - 1).map(np.uint64),
                      st.integers(min_value=-(2**63), max_value=2**63 - 1).map(np.int64),
                      st.integers(min_value=-(2**31), max_value=2**31 - 1).map(np.int32)))
def test_seed_keywords_take_integers_numpys_included_within_range(seed):
    value, error = _keyword(SEED_OPTION, seed)
    if 0 <= int(seed) <= MAX_SEED:
        assert value == int(seed) and type(value) is int
    else:
        assert isinstance(error, ValueError) and f"0 to {MAX_SEED}, got " in str(error)
        assert str(int(seed)) in str(error)


@pytest.mark.parametrize("seed", [True, False, np.bool_(True), 1.0, np.float32(3), "", b"7"])
def test_seed_keywords_of_other_types_are_refused_or_unset(seed):
    value, error = _keyword(SEED_OPTION, seed)
    if seed == "":
        assert (value, error) == (None, None)  # blank: unset, as an empty variable
    else:
        assert isinstance(error, TypeError) and "whole number" in str(error)


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("seed", [-1, 2**32, 2**64])
def test_seed_is_range_checked_with_or_without_determinism(seed, deterministic):
    with pytest.raises(ValueError, match=rf"^seed: expected a whole number from 0 to {MAX_SEED}, got {seed}$"):
        tf_patches.apply_all(seed=seed, deterministic=deterministic, env=NOT_INSTALLED)


def test_a_seed_without_determinism_is_said_to_be_unused():
    machine = {"distribution": "tensorflow", "version": "2.21.0"}
    report = tf_patches.apply_all(seed=7, env=machine, only=["op_determinism"])
    assert report["op_determinism"].reason.endswith("; seed 7 unused without it")
    tf_patches.revert_all()
    assert "unused" not in tf_patches.apply_all(env=machine, only=["op_determinism"])["op_determinism"].reason


def test_a_bad_seed_variable_warns_once_and_the_default_seed_is_used(monkeypatch):
    monkeypatch.setenv("TF_PATCHES_SEED", "-1")
    options._warned.clear()
    with pytest.warns(ConfigWarning, match=r"ignoring TF_PATCHES_SEED='-1': expected a whole number from 0 to"):
        report = tf_patches.apply_all(env=NOT_INSTALLED)
    assert report.status("op_determinism") == "skipped"


@pytest.mark.parametrize("argv", [["--seed", "4294967296"], ["--seed", "-1"], ["--seed=0x10"],
                                  ["--graph-growth-guard", "loud"], ["--only", ","]])
def test_run_refuses_a_bad_option_with_exit_2_before_the_command_starts(argv, monkeypatch, capsys):
    started = []
    monkeypatch.setattr(os, "execvpe", lambda *args: started.append(args))
    with pytest.raises(SystemExit) as exit_:
        main(["run", *argv, "--", "true"])
    assert exit_.value.code == 2 and started == []
    assert "error: argument --" in capsys.readouterr().err


def test_run_passes_good_options_as_variables(monkeypatch):
    started = []
    monkeypatch.setattr(os, "execvpe", lambda *args: started.append(args))
    main(["run", "--seed", "0042", "--only", "none", "--exclude", "", "--", "true", "x"])
    (name, argv, env), = started
    assert (name, argv) == ("true", ["true", "x"])
    assert env["TF_PATCHES_SEED"] == "42" and env["TF_PATCHES_ONLY"] == "none"  # as apply_all reads them
    assert env.get("TF_PATCHES_EXCLUDE") == os.environ.get("TF_PATCHES_EXCLUDE")  # blank: not passed


def test_report_json_into_a_pipe_whose_reader_has_gone_prints_no_traceback():
    # `tf-patches report --json | head -1`: head leaves before the report is written.
    proc = subprocess.Popen([sys.executable, "-m", "tf_patches", "report", "--json", "--no-import"],
                            env=fresh_env(), cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_run_with_an_empty_command_name_says_not_found(capsys):
    assert main(["run", "--", ""]) == EXIT_NOT_FOUND
    assert capsys.readouterr().err == "tf-patches run: command not found: '' (an empty command name)\n"


def test_demo_without_tensorflow_says_so_in_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # find_spec then reports it missing
    monkeypatch.setattr(demo, "_leak", lambda *args: pytest.fail("the demo started a child"))
    assert main(["demo", "--quick"]) == 2
    assert capsys.readouterr().err == ("tf-patches demo: TensorFlow is not installed here: "
                                       "pip install 'tf-patches[tf]' (or tensorflow)\n")


# --- TF_PATCHES_ONLY: empty is unset, "none" is the off switch ---------------------------------

def _reasons(**kwargs):
    return {row.name: row.reason for row in tf_patches.apply_all(env=NOT_INSTALLED, **kwargs)}


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_only_variable_is_unset(monkeypatch, value):
    monkeypatch.setenv("TF_PATCHES_ONLY", value)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        reasons = _reasons()
    assert set(reasons.values()) == {"TensorFlow is not installed"}


@pytest.mark.parametrize("how", [{"TF_PATCHES_ONLY": "none"}, {"TF_PATCHES_ONLY": " none "}, {"only": "none"},
                                 {"only": []}, {"only": ()}])
def test_only_none_or_an_empty_list_turns_every_patch_off(monkeypatch, how):
    for variable, value in how.items():
        if variable.startswith("TF_"):
            monkeypatch.setenv(variable, value)
    keywords = {key: value for key, value in how.items() if not key.startswith("TF_")}
    reasons = _reasons(**keywords)
    assert len(reasons) == len(registry.names())
    assert all(reason.startswith("off: only= names no patch") for reason in reasons.values()), reasons


@pytest.mark.parametrize("text", ["None", "NONE", " nOnE "])
def test_only_none_in_another_case_is_ambiguous_and_refused_everywhere(monkeypatch, text):
    """``None`` reads as Python's only=None (every patch), ``none`` is the off switch: a variable
    spelled so warns once and is ignored (every patch, the default); a keyword or a flag is refused."""
    monkeypatch.setenv("TF_PATCHES_ONLY", text)
    options._warned.clear()
    with pytest.warns(ConfigWarning, match=r"ignoring TF_PATCHES_ONLY=.*is ambiguous: none \(in lower case\)") as caught:
        reasons = _reasons()
    assert len([w for w in caught if issubclass(w.category, ConfigWarning)]) == 1
    assert set(reasons.values()) == {"TensorFlow is not installed"}  # decided as with no only= at all
    with pytest.raises(ValueError, match="^only: .*is ambiguous"):
        tf_patches.apply_all(only=text, env=NOT_INSTALLED)
    assert _flag(ONLY_OPTION, text) is None


ONLY_OPTION = next(option for option in registry.all_options() if option.name == "only")


def test_blank_text_is_unset_for_every_variable(monkeypatch):
    for variable in [option.env_var for option in registry.all_options()] + ["TF_PATCHES_ASSUME"]:
        monkeypatch.setenv(variable, " \t ")
    options._warned.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        report = tf_patches.apply_all()
    assert report.environment.source == "detected"  # not an assume-file named "   "


def test_a_bad_value_of_any_size_or_type_is_quoted_briefly(monkeypatch):
    """A file name of 100,000 characters comes back whole in the OSError: not in the warning."""
    monkeypatch.setenv("TF_PATCHES_ASSUME", "a" * 100_000)
    options._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tf_patches.apply_all(only="none")
        options.resolve([ONLY_OPTION], {}, environ={"TF_PATCHES_ONLY": ["no_such_patch"] * 10_000})  # not text
    messages = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]
    assert [message.split("=")[0] for message in messages] == ["tf-patches: ignoring TF_PATCHES_ASSUME",
                                                               "tf-patches: ignoring TF_PATCHES_ONLY"]
    assert all(len(message) < 1000 and "a" * 100 not in message for message in messages), messages
    assert "File name too long" in messages[0]


def test_exclude_none_excludes_nothing():
    assert set(_reasons(exclude="none").values()) == {"TensorFlow is not installed"}


@pytest.mark.parametrize("value", [",", "none,seed_kernel_cache"])
def test_only_text_naming_no_patch_by_accident_is_refused(value):
    with pytest.raises(ValueError, match="^only: "):
        tf_patches.apply_all(only=value, env=NOT_INSTALLED)


# --- hostile TF_PATCHES_ASSUME ------------------------------------------------------------------

nested = st.integers(min_value=1, max_value=200_000).map(lambda depth: "[" * depth + "]" * depth)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)
descriptions = st.one_of(
    json_values.map(json.dumps),
    st.dictionaries(st.sampled_from(["distribution", "version", "cuda_version", "gpus", "tensorflow_installed",
                                     "python_version", "unknown"]), json_values, max_size=5).map(json.dumps),
    nested.map(lambda brackets: '{"gpus": ' + brackets + "}"),
    nested,
    st.just('{"version": ' + "1" * 5000 + "}"),
    st.just('{"version": "\\ud800"}'),
)


@FUZZ
@given(content=st.one_of(descriptions.map(lambda text: text.encode()), st.binary(max_size=64)))
def test_an_assume_file_of_any_content_raises_only_what_the_engine_catches(tmp_path, content):
    path = tmp_path / "machine.json"
    path.write_bytes(content)
    try:
        env = Environment.from_json_file(str(path))
    except (OSError, ValueError, TypeError) as exc:
        assert len(str(exc)) < 1000
        return
    str(Report((), env))
    Report((), env).to_json()


def test_an_assume_file_that_is_not_a_small_regular_file_is_refused(tmp_path):
    large = tmp_path / "large.json"
    large.write_text(json.dumps({"version": "2.21.0", "distribution": "x" * MAX_JSON_BYTES}))
    for path, message in [(large, "larger than"), (tmp_path, "not a regular file"),
                          ("/dev/zero", "not a regular file")]:
        with pytest.raises(ValueError, match=message):
            Environment.from_json_file(str(path))


def test_a_bad_assume_file_warns_once_and_detection_goes_on(tmp_path, monkeypatch):
    path = tmp_path / "deep.json"
    path.write_text("[" * 20_000 + "]" * 20_000)  # within the size cap, past the recursion limit
    monkeypatch.setenv("TF_PATCHES_ASSUME", str(path))
    options._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = tf_patches.apply_all(only="none")
    messages = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]
    assert len(messages) == 1 and "TF_PATCHES_ASSUME" in messages[0] and "detecting instead" in messages[0]
    assert report.environment.source == "detected"


def test_a_fifo_or_stdin_as_assume_file_neither_blocks_nor_eats_stdin(tmp_path):
    """In a fresh process reading its stdin after apply_all(): a regression would hang (the FIFO
    has no writer) or swallow the input, both seen by the parent."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code = """
        import json, os, sys, warnings
        import tf_patches
        seen = []
        for path in sys.argv[1:]:
            os.environ["TF_PATCHES_ASSUME"] = path
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                source = tf_patches.apply_all(only="none").environment.source
            seen.append([source, [str(w.message) for w in caught]])
        print(json.dumps({"seen": seen, "stdin": sys.stdin.read()}))
    """
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(fifo), "/proc/self/fd/0"],
                          input="the program's own input", capture_output=True, text=True, timeout=60,
                          env=fresh_env(), cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["stdin"] == "the program's own input"
    for source, messages in result["seen"]:
        assert source == "detected"
        assert len(messages) == 1 and "is not a regular file; detecting instead" in messages[0], messages


# --- versions of any length ---------------------------------------------------------------------

versions = st.one_of(
    st.text(max_size=30),
    st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){0,3}((a|b|rc|\.post|\.dev)[0-9]{0,3})?(\+[a-z0-9.]{1,12})?", fullmatch=True),
    st.builds(lambda prefix, digits: prefix + "9" * digits,  # past Python's 4,300-digit int limit
              st.sampled_from(["", "2.", "1.15.5+nv", "1.15.5+nv22.", "2.16.0rc", "2.15.0.post", "2.21.0.dev"]),
              st.integers(4200, 6000)),
)


@FUZZ
@given(version=versions, python=st.one_of(st.none(), versions), cuda=st.one_of(st.none(), versions))
def test_no_version_of_any_length_makes_anything_raise(version, python, cuda):
    env = Environment.from_dict({"distribution": "nvidia-tensorflow", "version": version, "cuda_version": cuda,
                                 "python_version": python, "gpus": [{"name": "GPU", "compute_capability": cuda}]})
    env.local_tag, env.nvidia_build
    for spec in registry.specs():
        for chosen in ({}, {"deterministic": True}):
            verdict, reason = spec.check(env, chosen)
            assert verdict in (True, False, None) and isinstance(reason, str)
            assert "cannot parse" not in reason or len(reason) < 300  # an unparseable version is quoted briefly
    report = Report(tuple(Row(spec.name, spec.title, "skipped", reason, spec.issue)
                          for spec in registry.specs()), env)
    json.loads(report.to_json())
    str(report)


def test_the_report_command_takes_any_version_from_an_assume_file():
    """``tf-patches report --assume FILE`` fuzzed in a fresh process that never imports
    TensorFlow, so every patch is decided (pending, skipped, advised) and none installs."""
    result = run_fresh(f"""
        import contextlib, io, json, os, tempfile
        from hypothesis import given, settings, strategies as st
        import tf_patches
        from tf_patches.cli import main
        from tests.test_options import versions

        path = os.path.join(tempfile.mkdtemp(), "machine.json")
        runs = []

        @settings(max_examples=60, deadline=None)
        @given(version=versions, as_json=st.booleans())
        def report(version, as_json):
            with open(path, "w") as handle:
                json.dump({{"distribution": "tensorflow", "version": version}}, handle)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                status = main(["report", "--assume", path, "--no-import"] + (["--json"] if as_json else []))
            tf_patches.revert_all()
            assert status == 0
            if as_json:
                assert json.loads(out.getvalue())["environment"]["version"] == version
            runs.append(version)

        report()
        print(json.dumps({{"runs": len(runs), "long": sum(len(v) > 4300 for v in runs),
                          "tensorflow": "tensorflow" in __import__("sys").modules}}))
    """)
    assert result["runs"] >= 60 and result["long"] > 0 and not result["tensorflow"], result
