"""Where a process's seed comes from, as the environment says it (issue 39): a fan-out's
``TF_PATCHES_SEED_ORIGIN`` is trusted only from this process or an ancestor, as
``TF_PATCHES_SEEDED_BY`` is, so one leaked into an image or a shell cannot override the seed
``apply_all(deterministic=True, seed=...)`` asks for; and a ``SEEDED_BY`` naming PID 1 (every
process's ancestor) is never a parent. In this process, no TF."""

from __future__ import annotations

import os

import pytest

from tf_patches.core import seeds
from tf_patches.patches import op_determinism


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setattr(seeds, "_assigned", None)
    for variable in (seeds.ORIGIN_VARIABLE, seeds.SEEDED_BY_VARIABLE):
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


def test_a_leaked_seed_origin_does_not_override_the_seed_asked_for(clean: pytest.MonkeyPatch) -> None:
    clean.setenv(seeds.ORIGIN_VARIABLE, "999999:77:derive_seed(1, 'map_isolated', 0) for map_isolated items[0]")
    assert op_determinism.seed_decision({"seed": 5}) == (5, "")
    assert seeds.ORIGIN_VARIABLE not in os.environ  # read once, then gone


def test_a_seed_origin_set_here_or_by_an_ancestor_is_the_items_seed(clean: pytest.MonkeyPatch) -> None:
    for variable, value in seeds.item_variables(7, "map_isolated", 3).items():  # set by this process
        clean.setenv(variable, value)
    derived = seeds.derive_seed(7, "map_isolated", 3)
    assert op_determinism.seed_decision({"seed": 5})[0] == derived
    clean.setattr(seeds, "_assigned", None)
    parent = min(pid for pid in seeds._ancestors() if pid > 1)
    clean.setenv(seeds.ORIGIN_VARIABLE, f"{parent}:{derived}:derive_seed(7, 'map_isolated', 3) by the parent")
    assert op_determinism.seed_decision({"seed": 5}) == (derived, " (derive_seed(7, 'map_isolated', 3) by the parent)")


def test_a_seed_origin_without_its_pid_is_malformed_and_ignored(clean: pytest.MonkeyPatch) -> None:
    clean.setenv(seeds.ORIGIN_VARIABLE, "77:derive_seed(1, 'map_isolated', 0)")  # 0.2's form, or a hand-made one
    with pytest.warns(Warning, match=seeds.ORIGIN_VARIABLE):
        assert op_determinism.seed_decision({"seed": 5}) == (5, "")


def test_a_seeded_by_marker_naming_pid_1_is_never_a_parent(clean: pytest.MonkeyPatch) -> None:
    clean.setenv(seeds.SEEDED_BY_VARIABLE, "1:5")  # every process's ancestor: it proves nothing
    assert seeds.seeded_parent() is None
    assert op_determinism.seed_decision({"seed": 5}) == (5, "")
