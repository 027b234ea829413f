"""The experiment knobs of ``tf-patches repro``: what a run's processes change, in process, so that
``repro`` can prove a cause by fixing it alone (issue 36, "Experiments that prove a cause").

``repro`` names the knobs of an experiment in ``TF_PATCHES_REPRO_KNOBS`` (``name,name``); every
Python process of the run reads them at start-up (only under ``TF_PATCHES_REPRO_DIR``) and
:mod:`.recorders` applies them where it records (the same wrappers, so a knob costs nothing more).
An unknown name is ignored with one line on stderr: a newer ``repro`` driving an older tf-patches in
the run's tree must never break the program. ``PYTHONHASHSEED`` and tf-patches' own flags are knobs
``repro`` sets from outside the process: not here.

Standard library only, imported at start-up under repro: Python 3.8 syntax.
"""

from __future__ import annotations

import os
import sys

VARIABLE = "TF_PATCHES_REPRO_KNOBS"
SEED = 0  # the one seed every knob sets: two runs under the same knobs get the same streams
# name -> what it does (repro's experiment lines and the README read these words).
KNOBS = {
    "seed_python": "random.seed(0) at start-up; random.Random() seeded from 0 and its creation count",
    "seed_numpy": "np.random.seed(0) when NumPy loads; default_rng(), RandomState() and the bit generators "
                  "(PCG64() ...) seeded from 0 and their creation count",
    "seed_tf": "tf.random.set_seed(0) once TensorFlow has loaded; tf.random.Generator.from_non_deterministic_state() "
               "(the global generator's too) becomes from_seed, seeded from 0 and its creation count",
    "pin_seeds": "every seed the program sets (tf.random.set_seed, np.random.seed, random.seed, "
                 "default_rng(x), Random(x), RandomState(x), PCG64(x) ..., Generator.from_seed(x)) is 0 instead",
    "tfdata_deterministic": "deterministic=False (map, interleave, batch) and Options.deterministic = False "
                            "become True",
    "list_files_seed": "Dataset.list_files(...) shuffled without a seed gets seed=0",
}


def parse(text: str) -> tuple:
    """``(known, unknown)``: the knob names in ``text`` (commas or spaces between them), each
    once, in the order given."""
    known, unknown = [], []
    for name in text.replace(",", " ").split():
        target = known if name in KNOBS else unknown
        if name not in target:
            target.append(name)
    return tuple(known), tuple(unknown)


def from_environment() -> tuple:
    """The knobs ``TF_PATCHES_REPRO_KNOBS`` names; an unknown one is ignored, said once on stderr."""
    known, unknown = parse(os.environ.get(VARIABLE, ""))
    if unknown and sys.stderr is not None:
        try:
            sys.stderr.write(f"tf-patches: repro: unknown experiment knob {', '.join(map(repr, unknown))} in "
                             f"{VARIABLE}, ignored (known: {', '.join(KNOBS)})\n")
        except Exception:  # a closed stderr: the program runs on
            pass
    return known


def pinned(value: object) -> object:
    """``pin_seeds``: the seed a program set, as the knob passes it on (``None`` stays ``None``:
    "reseed from the OS" is no seed to pin)."""
    return value if value is None else SEED


def generator_seed(count: int) -> list:
    """``seed_numpy``: the seed of the ``count``-th ``default_rng()`` of a process (a list is a
    ``SeedSequence`` entropy: distinct generators, the same in every run)."""
    return [SEED, count]


def instance_seed(count: int) -> int:
    """``seed_python``/``seed_tf``: the seed of the ``count``-th ``random.Random()`` or TF generator made
    without one (those take a whole number: distinct from ``SEED`` itself, so the first is not the
    stream of the module's own seeded generator; the same in every run)."""
    return SEED * 2 ** 32 + count + 1
