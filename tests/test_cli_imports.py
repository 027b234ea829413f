"""`tf-patches --help` imports neither TensorFlow nor a patch module (issue 38): only the command
given builds its flags, which name every patch option."""

from tests.fresh import run_fresh

PROGRAM = """
    import contextlib, io, json, sys
    from tf_patches import cli
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            cli.main({argv!r})
        except SystemExit:
            pass
    print(json.dumps([sorted(name for name in sys.modules if name.startswith(("tensorflow", "tf_patches.patches"))),
                      "--deterministic" in out.getvalue()]))
"""


def test_help_lists_the_commands_without_loading_the_patches():
    assert run_fresh(PROGRAM.format(argv=["--help"])) == [[], False]


def test_a_command_s_help_still_names_every_patch_option():
    loaded, flags = run_fresh(PROGRAM.format(argv=["run", "--help"]))
    assert flags and "tf_patches.patches.op_determinism" in loaded and "tensorflow" not in loaded


TOOLS_LOADED = """
    import contextlib, io, json, sys
    from tf_patches import cli
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            cli.main({argv!r})
        except SystemExit:
            pass
    print(json.dumps(sorted({{name.split(".")[1] for name in sys.modules if name.startswith("tf_patches.")
                             and name.split(".")[1] in ("autoapply", "diagnosis", "repro", "testing", "demo")}})))
"""


def test_only_the_command_given_is_imported():
    """`tf-patches run` starts the user's command without loading repro, diagnose or the demo."""
    assert run_fresh(TOOLS_LOADED.format(argv=["--help"])) == []
    assert run_fresh(TOOLS_LOADED.format(argv=["run", "--help"])) == ["autoapply"]
    assert run_fresh(TOOLS_LOADED.format(argv=["repro", "--help"])) == ["repro"]
