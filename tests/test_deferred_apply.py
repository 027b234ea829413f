"""apply_all() without arguments before `import tensorflow` (issue 38): it arms the import hook and
nothing more, and decides when TF starts importing or when its report is read: the same rows, the
same prepared state, as deciding at the call."""

import pytest

from tests.fresh import run_fresh


def test_it_imports_only_the_engine_and_decides_when_the_report_is_read():
    result = run_fresh("""
        import json, sys
        before = set(sys.modules)
        import tf_patches
        report = tf_patches.apply_all()
        armed = sorted(name for name in set(sys.modules) - before if name.startswith("tf_patches"))
        rows = [(row.name, row.status) for row in report]  # read: decided now, TF not imported
        print(json.dumps({"armed": armed, "pending": report.status("seed_kernel_cache"),
                          "a_report": isinstance(report, tf_patches.Report) and report == tf_patches.report(),
                          "same": rows == [(row.name, row.status) for row in tf_patches.report()],
                          "tf": "tensorflow" in sys.modules}))
    """)
    assert result["armed"] == ["tf_patches", "tf_patches._version", "tf_patches.core",
                               "tf_patches.core.engine", "tf_patches.core.importhook",
                               "tf_patches.core.option_table"]
    assert result == dict(result, pending="pending", a_report=True, same=True, tf=False)


@pytest.mark.parametrize("setting", ["", "TF_PATCHES_STRICT=1", "keyword"])
def test_tensorflow_import_applies_what_waited(setting):
    """Unread, it is decided when TF starts importing; with an option set it is decided at the call
    (a bad value warns at the user's line) and is not waiting: the same end."""
    env = dict([setting.split("=")]) if "=" in setting else {}
    call = "tf_patches.apply_all(strict=False)" if setting == "keyword" else "tf_patches.apply_all()"
    result = run_fresh(f"""
        import json, sys
        import tf_patches
        from tf_patches.core import importhook
        {call}
        waited = importhook.deferred()
        import tensorflow as tf
        print(json.dumps([waited, tf_patches.report().status("seed_kernel_cache"),
                          tf_patches.is_patched(tf.py_function)]))
    """, env=env)
    assert result == [setting == "", "applied", True]


def test_python_seeded_between_the_call_and_the_import_is_seen():
    """keras_seed watches random.seed from apply_all() on: a seed made after a waiting call, before
    `import tensorflow`, counts (the first random.seed() decides what waited)."""
    result = run_fresh("""
        import json, random
        import tf_patches
        from tf_patches.core import importhook
        seed = random.seed
        tf_patches.apply_all()
        stood_in = random.seed is not seed
        random.seed(3)
        seeded = random.random() == random.Random(3).random()
        print(json.dumps([stood_in, importhook.deferred(), seeded, tf_patches.report().status("keras_seed")]))
    """)
    assert result == [True, False, True, "pending"]


def test_revert_all_reverts_what_waited_as_if_it_had_been_applied():
    result = run_fresh("""
        import json, os, random, sys
        import tf_patches
        seed = random.seed
        tf_patches.apply_all()
        reverted = tf_patches.revert_all()
        import tensorflow as tf
        print(json.dumps([reverted.status("seed_kernel_cache"), reverted["seed_kernel_cache"].reason,
                          random.seed is seed, tf_patches.report().status("seed_kernel_cache")]))
    """)
    assert result == ["skipped", "reverted by revert_all()", True, "skipped"]


def test_a_failure_when_tensorflow_imports_never_breaks_the_import():
    """Whatever fails in the waiting apply is logged at `import tensorflow`, which goes on; reading
    the report then raises what failed."""
    result = run_fresh("""
        import json
        import tf_patches
        from tf_patches.core import engine

        report = tf_patches.apply_all()

        def broken():
            raise ImportError("a module of tf-patches could not load")

        engine._import_all = broken
        import tensorflow as tf
        try:
            report.status("seed_kernel_cache")
            read = "read"
        except ImportError as exc:
            read = str(exc)
        print(json.dumps([tf.constant(1).numpy().item(), read]))
    """)
    assert result == [1, "a module of tf-patches could not load"]
