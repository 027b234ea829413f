"""core.traps: one ReproducibilityWarning per trap and user line, attributed to that line, and the
events `tf-patches repro` reads (in this process, and in the run's evidence folder)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import warnings

import pytest

import tf_patches
from tf_patches.core import traps

from .fresh import run_fresh


@pytest.fixture(autouse=True)
def _forget():
    traps.forget()
    yield
    traps.forget()


def _sprung_by_library() -> bool:
    # Stands for a trap's detector, which names the line that called into the library.
    return traps.warn("demo_trap", "runs will differ; fix: seed it", site=traps.user_site(sys._getframe(1)))


def test_warns_once_per_trap_and_line_at_the_users_line(monkeypatch, tmp_path):
    monkeypatch.setenv(traps.REPRO_DIR_VARIABLE, str(tmp_path))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        first = [_sprung_by_library() for _ in range(3)]  # one line, three times
        second = _sprung_by_library()  # another line
    assert first == [True, False, False] and second is True
    assert [w.category for w in caught] == [tf_patches.ReproducibilityWarning] * 2
    assert issubclass(tf_patches.ReproducibilityWarning, tf_patches.TfPatchesWarning)
    here = os.path.abspath(__file__)
    assert [(w.filename, w.lineno) for w in caught] == [(here, line), (here, line + 1)]
    assert str(caught[0].message) == f"tf-patches: demo_trap: runs will differ; fix: seed it ({here}:{line})"
    recorded = traps.events()
    assert [event.where for event in recorded] == [f"{here}:{line}", f"{here}:{line + 1}"]
    lines = (tmp_path / f"traps-{os.getpid()}.jsonl").read_text().splitlines()
    assert [json.loads(text) for text in lines] == [event.to_dict() for event in recorded]


def test_key_dedups_across_lines_and_an_explicit_site_is_used():
    site = ("/user/train.py", 12, "augment")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert traps.warn("demo_trap", "one", site=site, key="dataset 1")
        assert not traps.warn("demo_trap", "two", site=("/user/train.py", 13, "f"), key="dataset 1")
    assert [(w.filename, w.lineno) for w in caught] == [("/user/train.py", 12)]
    assert traps.events()[0].where == "/user/train.py:12"


def test_an_unwritable_evidence_folder_does_not_break_the_program(monkeypatch, tmp_path):
    monkeypatch.setenv(traps.REPRO_DIR_VARIABLE, str(tmp_path / "missing"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert traps.warn("demo_trap", "x")
    assert len(traps.events()) == 1


def test_the_users_filter_can_make_it_an_error():
    with warnings.catch_warnings():
        warnings.simplefilter("error", tf_patches.ReproducibilityWarning)
        with pytest.raises(tf_patches.ReproducibilityWarning):
            traps.warn("demo_trap", "x")


def test_patch_fills_in_the_traps_patch_name():
    from tf_patches.core.gate import Gate
    from tf_patches.core.patch import Patch

    patch = Patch(name="my_trap", title="t", issue="u", gate=Gate(), install=lambda ctx: "detecting",
                  trap=traps.Trap(explanation="e", fix="f"))
    assert patch.trap.patch == "my_trap"


def test_autograph_lines_are_mapped_back_to_the_users_source(tmp_path):
    # In a tf.function the user's function runs as AutoGraph's generated copy (from a real source
    # file: AutoGraph leaves a function it cannot read the source of unconverted): the warning and
    # the event name the line the user wrote, not the generated file's.
    program = tmp_path / "train.py"
    program.write_text(textwrap.dedent("""
        import tensorflow as tf
        from tf_patches.core import traps

        @tf.function
        def step(x):
            traps.warn("demo_trap", "inside a trace")
            return x + 1
    """))
    result = run_fresh(f"""
        import json, runpy, warnings
        from tf_patches.core import traps
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            namespace = runpy.run_path({str(program)!r})
            import tensorflow as tf
            namespace["step"](tf.constant(1))
        generated = [e.where for e in traps.events()]
        print(json.dumps([[w.filename, w.lineno] for w in caught if w.category is traps.ReproducibilityWarning] + generated))
    """)
    assert result == [[str(program), 7], f"{program}:7"]
