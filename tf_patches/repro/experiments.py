"""Experiments that prove a cause: where runs differ, the command runs again (two runs each) with
one knob turned (:data:`.vocabulary.KNOBS`: PYTHONHASHSEED fixed, global seeds set before the
program starts, the program's own seeds pinned, tf.data made deterministic, a fresh working folder,
a trap's fix), one suspect at a time. A suspect is *confirmed* only where its knob alone made the
runs repeat. Where no knob alone did, the suspects' knobs are tried together (their causes then
stand together, unconfirmed); where that fails too, they are ruled out, and repro's other knobs
are tried in turn, cheapest first: one that makes the runs repeat names its cause, confirmed;
none leaves ``unknown``. ``limit`` caps the experiments (each costs two runs of the command).
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple

from .model import Cause, Experiment, REPEATABLE
from ..core.settings import Settings
from .vocabulary import CAUSES, FALLBACK_KNOBS, KNOBS, Knob, fix_text, settings_of

RUNS = 2  # runs per experiment
DEFAULT_LIMIT = 4
# Runs the command RUNS times with a knob turned: (verdict, summary) of their comparison.
Rerun = Callable[[Knob], Tuple[str, str]]
# The cause an experiment's knob names where no suspect had it (the fallback knobs).
_NAMED_BY = {"hash_seed": "hash_order", "global_seeds": "tf_seed_unset", "seed_tf": "tf_seed_unset",
             "seed_numpy": "numpy_unseeded", "seed_python": "python_random_unseeded",
             "tfdata_deterministic": "tfdata_nondeterministic", "list_files_seed": "list_files_shuffle",
             "pin_seeds": "seed_varies", "fresh_state": "state_left_by_run", "op_determinism": "unknown"}
_NARROWER = ("seed_numpy", "seed_python")  # after global_seeds, which one alone (else TF's: tf_seed_unset)


class Outcome:
    """The causes after the experiments: confirmed first, then suspects; the ones ruled out."""

    def __init__(self) -> None:
        self.causes: List[Cause] = []
        self.ruled_out: List[Cause] = []
        self.experiments: List[Experiment] = []


def knob_of(cause: Cause) -> Optional[Knob]:
    """The knob that tests ``cause``: a trap's is its own fix (its tf-patches run flags)."""
    if cause.knob.startswith("trap:"):
        return Knob(cause.knob, f"the {cause.knob[5:]} trap's fix (tf-patches run {' '.join(cause.run_flags)})",
                    fix=cause.settings.items() if cause.settings else ())
    return KNOBS.get(cause.knob)


def run_experiments(suspects: Sequence[Cause], rerun: Rerun, limit: int = DEFAULT_LIMIT,
                    skip: Sequence[str] = (), stopped: Callable[[], bool] = lambda: False,
                    tensorflow: bool = True) -> Outcome:
    """Confirm or rule out ``suspects`` (strongest first) with at most ``limit`` experiments;
    ``skip``: knobs that would change nothing here (PYTHONHASHSEED already set); without
    ``tensorflow`` (no process of the runs imported it), TF's knobs are not tried either."""
    outcome = Outcome()
    if not tensorflow:
        skip = [*skip, *(name for name, knob in KNOBS.items() if knob.tensorflow)]
    tried: List[str] = []

    def experiment(knob: Knob, tests: List[str], together: bool = False) -> bool:
        if len(outcome.experiments) >= limit or stopped():
            return False
        verdict, summary = rerun(knob)
        outcome.experiments.append(Experiment(knob.name, knob.words, tests, RUNS, verdict, summary, together))
        tried.append(knob.name)
        return verdict == REPEATABLE

    suspects = list(suspects)
    testable = [(cause, knob_of(cause)) for cause in suspects]
    order: List[Knob] = []
    for _, knob in testable:
        if knob is not None and knob.name not in [k.name for k in order] and knob.name not in skip:
            order.append(knob)
    confirmed_by: Optional[str] = None
    for knob in order:
        names = [cause.name for cause, k in testable if k is not None and k.name == knob.name]
        if experiment(knob, names):
            confirmed_by = knob.name
            break
    if confirmed_by is not None:
        for cause, knob in testable:
            if knob is not None and knob.name == confirmed_by:
                cause.confirmed = True
                cause.evidence.append(f"confirmed: with {knob.words}, the runs repeat")
        _said_untested(testable, tried)
        outcome.causes = sorted(suspects, key=lambda cause: not cause.confirmed)
        return outcome
    tested = [cause for cause, knob in testable if knob is not None and knob.name in tried]
    together = _together([knob for knob in order if knob.name in tried])
    if together is not None and experiment(together, [cause.name for cause in tested], together=True):
        for cause in tested:
            cause.evidence.append(f"no fix alone made the runs repeat; {together.words} together did")
        _said_untested(testable, tried)
        outcome.causes = suspects
        return outcome
    if together is not None and together.name in tried:
        outcome.ruled_out = tested  # alone and together, their knobs changed nothing
        for cause in tested:
            cause.evidence.append("ruled out: its fix did not make the runs repeat")
    elif len(tested) == 1 and tested[0].knob:
        outcome.ruled_out = tested
        tested[0].evidence.append("ruled out: its fix did not make the runs repeat")
    left = [cause for cause in suspects if cause not in outcome.ruled_out]
    # The differing values are the clock: no knob of repro's turns it, so none is tried.
    found = None if any(cause.name == "clock_in_output" for cause in left) else _fallback(experiment, tried, skip)
    if found is not None:
        left.insert(0, found)
    _said_untested(testable, tried)
    outcome.causes = left or [unknown(outcome.experiments)]
    return outcome


def _fallback(experiment: Callable[[Knob, List[str]], bool], tried: List[str], skip: Sequence[str]) -> Optional[Cause]:
    """repro's own knobs, cheapest first, where no suspect's did: the first that makes the runs
    repeat names its cause. All global seeds at once is narrowed down to one where experiments
    are left (a generator no recorder sees, such as scikit-learn's use of NumPy's global state)."""
    for name in FALLBACK_KNOBS:
        if name in tried or name in skip:
            continue
        if experiment(KNOBS[name], [_NAMED_BY[name]]):
            if name == "global_seeds":
                for narrower in _NARROWER:
                    if narrower not in skip and experiment(KNOBS[narrower], [_NAMED_BY[narrower]]):
                        return _found(narrower)
            return _found(name)
    return None


def _found(knob: str) -> Cause:
    """The cause a fallback knob proved: confirmed, but for ``unknown`` (op determinism with
    seeds fixes many things at once: no one cause is proven)."""
    name = _NAMED_BY[knob]
    kind = CAUSES[name]
    if name == "unknown":
        cause = Cause(name, "", fix="turn op determinism on (tf.config.experimental.enable_op_determinism() with "
                                    "keras.utils.set_random_seed), or find the op: tf-patches run --deterministic",
                      settings=settings_of(KNOBS[knob].fix), knob=knob)
    else:
        cause = Cause(name, "", fix=fix_text(name, ""), settings=settings_of(kind.fix_settings), knob=knob,
                      confirmed=True)
    cause.evidence.append(f"no recorder saw it, but with {KNOBS[knob].words} the runs repeat")
    return cause


def _together(knobs: Sequence[Knob]) -> Optional[Knob]:
    """One knob that turns all of ``knobs`` at once (None for fewer than two)."""
    if len(knobs) < 2:
        return None
    return Knob("+".join(knob.name for knob in knobs), " and ".join(knob.words for knob in knobs),
                knobs=tuple(dict.fromkeys(name for knob in knobs for name in knob.knobs)),
                fix=Settings().merged(*(settings_of(knob.fix) for knob in knobs)).items(),
                fresh_state=any(knob.fresh_state for knob in knobs))


def _said_untested(testable: Sequence[Tuple[Cause, Optional[Knob]]], tried: Sequence[str]) -> None:
    for cause, knob in testable:
        if cause.confirmed:
            continue
        if knob is None:
            note = "no experiment can test it: a suspect"
        elif knob.name not in tried:
            note = "not tested (the experiments' limit, or an earlier knob made the runs repeat): a suspect"
        elif not any(line.startswith(("ruled out", "no fix alone")) for line in cause.evidence):
            note = f"with {knob.words} alone the runs still differ: not (alone) the cause"
        else:
            continue
        if note not in cause.evidence:
            cause.evidence.append(note)


def unknown(experiments: Sequence[Experiment]) -> Cause:
    tried = ", ".join(experiment.words for experiment in experiments)
    kind = CAUSES["unknown"]
    evidence = [f"none of repro's knobs made the runs repeat ({tried})" if tried else
                "no recorder saw a cause, and no experiment ran"]
    return Cause("unknown", "", evidence=evidence, fix=kind.fix)
