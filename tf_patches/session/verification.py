"""``--verify`` of ``tf-patches diagnose`` and ``repro``: the command run again with the fixes of
what the first runs named. One rule for both: the fixes' settings merged over the user's (the
fixes' values win, the user's other options stay), shown as the ``tf-patches run`` command line
that does the same by hand. Each tool then compares what its fix run found in its own terms
(diagnose: the growth it removed; repro: whether the runs now repeat)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, NamedTuple, Sequence

from ..core.settings import Settings


@dataclass
class Verification:
    """What ``--verify`` did, as each tool reports it: the ``fixes`` applied (patch or cause
    names) and the fix run's ``command`` as ``tf-patches run`` takes it. The tools add their
    own findings in a subclass (:class:`tf_patches.diagnosis.analysis.Verification`: the growth
    removed; :class:`tf_patches.repro.model.Verification`: whether the runs then repeat)."""

    fixes: List[str]
    command: List[str]


class FixRun(NamedTuple):
    """The fix run planned: ``fixes`` (the names whose fixes it applies), ``fix`` (their
    settings alone), ``settings`` (merged over the user's: what the run gets) and ``command``
    (``tf-patches run FLAGS -- COMMAND``, what a user types for the same)."""

    fixes: List[str]
    fix: Settings
    settings: Settings
    command: List[str]


def fix_run(fixes: Sequence[str], fix: Settings, settings: Settings, command: Sequence[str]) -> FixRun:
    fixed = fix.merged(settings)  # the fixes' values win over the user's; the user's others stay
    return FixRun(list(fixes), fix, fixed, ["tf-patches", "run", *fixed.to_flags(), "--", *command])
