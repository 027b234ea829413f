"""The causes ``tf-patches repro`` names, one line each (the README's table is this table), with
the fix a user makes in code, the ``tf-patches run`` flags where tf-patches can apply a fix, and
the knob an experiment turns to prove the cause (:mod:`.experiments`).

A cause is *confirmed* only where its knob alone made the runs repeat; found by evidence alone it
is a suspect. Traps of the registry (``keras_seed``, ``parallel_random_map``) are causes too:
their explanation, fix and flags are the trap's own ``TRAP``; their knob is their fix.
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Tuple

from ..core.settings import Settings

# A fix tf-patches applies, as Settings' keywords: made into a Settings where it is used (a
# Settings made here would load every patch module when repro's command line is built).
Fix = Tuple[Tuple[str, Any], ...]
# tf-patches' own settings that seed everything at `import tensorflow` (Python's random, NumPy's
# global generator, TF's global seed, Keras) and turn op determinism on: tf.data's
# deterministic=False is overridden then, and list_files' shuffle follows the global seed.
SEED_FIX: Fix = (("deterministic", True), ("seed", 0))
HASH_FIX: Fix = (("hash_seed", 0),)  # `tf-patches run` sets PYTHONHASHSEED for the command


def settings_of(fix: Fix) -> Optional[Settings]:
    """``fix`` as the Settings that apply it; None for no fix (a code change only)."""
    return Settings(**dict(fix)) if fix else None


class Knob(NamedTuple):
    """What one experiment changes: in-process knobs (``TF_PATCHES_REPRO_KNOBS``, armed by the
    recorders), tf-patches settings (PYTHONHASHSEED too), or a clean working folder."""

    name: str
    words: str  # what it does, for the report
    knobs: Tuple[str, ...] = ()
    fix: Fix = ()  # tf-patches settings, over the user's own
    fresh_state: bool = False
    tensorflow: bool = False  # changes nothing in runs that never import TensorFlow


KNOBS: Dict[str, Knob] = {knob.name: knob for knob in (
    Knob("hash_seed", "PYTHONHASHSEED=0 (string hash order fixed)", fix=HASH_FIX),
    Knob("global_seeds", "Python's, NumPy's and TF's global seeds set before the program starts",
         knobs=("seed_python", "seed_numpy", "seed_tf")),
    Knob("seed_tf", "TF's global seed set before the program starts", knobs=("seed_tf",), tensorflow=True),
    Knob("seed_numpy", "NumPy's global seed and unseeded default_rng() seeded", knobs=("seed_numpy",)),
    Knob("seed_python", "Python's random seeded before the program starts", knobs=("seed_python",)),
    Knob("pin_seeds", "every seed the program sets pinned to 0", knobs=("pin_seeds",)),
    Knob("tfdata_deterministic", "tf.data's deterministic=False turned to True", knobs=("tfdata_deterministic",),
         tensorflow=True),
    Knob("list_files_seed", "Dataset.list_files given a fixed shuffle seed", knobs=("list_files_seed",), tensorflow=True),
    Knob("fresh_state", "each run started without what earlier runs left in the working folder",
         fresh_state=True),
    Knob("op_determinism", "tf-patches run --deterministic --seed 0 (seeds and op determinism)", fix=SEED_FIX,
         tensorflow=True),
)}
# Tried in this order where the evidence names no candidate (cheapest and commonest first).
FALLBACK_KNOBS = ("hash_seed", "global_seeds", "tfdata_deterministic", "op_determinism")


class CauseKind(NamedTuple):
    """One name of the vocabulary."""

    name: str
    summary: str  # one line: the README's table
    fix: str  # what to change in code ({where}: the user's line, when known)
    fix_settings: Fix = ()  # tf-patches settings that fix it ((): a code change only)
    knob: str = ""  # the experiment that proves it ("": none can)


CAUSES: Dict[str, CauseKind] = {kind.name: kind for kind in (
    CauseKind("tf_seed_unset", "no global seed was set, and TF ops, Keras layers or datasets drew random numbers",
              "seed once at the top, before any model or dataset is built: keras.utils.set_random_seed(N) "
              "(Python, NumPy and TF), or tf-patches run --deterministic --seed N", SEED_FIX, "global_seeds"),
    CauseKind("seed_varies", "a seed was set from a value that differs between runs (the clock, a PID, os.urandom)",
              "set a fixed number as the seed{at}", (), "pin_seeds"),
    CauseKind("seeded_too_late", "an op or dataset took its seed before tf.random.set_seed was called",
              "move the seed (keras.utils.set_random_seed / tf.random.set_seed) above{at_line}, before the "
              "first random op or dataset is built; or tf-patches run --deterministic (seeds at import)",
              SEED_FIX, "seed_tf"),
    CauseKind("numpy_unseeded", "NumPy's global RandomState, or a default_rng()/Generator made without a seed, drew numbers",
              "give NumPy a seed{at}: np.random.default_rng(SEED) (or np.random.seed(N) for the global state; "
              "keras.utils.set_random_seed seeds the global state, not a new default_rng())", (), "seed_numpy"),
    CauseKind("python_random_unseeded", "Python's random drew numbers without random.seed",
              "seed Python's random at the top (random.seed(N), or keras.utils.set_random_seed(N)){at_note}",
              SEED_FIX, "seed_python"),
    CauseKind("hash_order", "the order of a set or dict of strings (Python's string hash, PYTHONHASHSEED) changed what ran",
              "sort what you iterate (sorted(set_of_strings)), or run with PYTHONHASHSEED=0 set before Python "
              "starts (tf-patches run --hash-seed 0)", HASH_FIX, "hash_seed"),
    CauseKind("tfdata_nondeterministic", "tf.data ran with deterministic=False (or Options.deterministic = False): "
              "element order follows thread timing",
              "drop deterministic=False{at} (and Options.deterministic = False), or turn op determinism on "
              "(tf.config.experimental.enable_op_determinism(); tf-patches run --deterministic)",
              SEED_FIX, "tfdata_deterministic"),
    CauseKind("list_files_shuffle", "Dataset.list_files shuffles file names by default, with no seed",
              "pass shuffle=False (or seed=N){at} to Dataset.list_files, or set a global seed first",
              SEED_FIX, "list_files_seed"),
    CauseKind("keras_seed", "tf.random.set_seed alone leaves Keras's default seeds to Python's random", "", (), ""),
    CauseKind("parallel_random_map", "a parallel tf.data map draws from stateful random ops in thread-timing order",
              "", (), ""),
    CauseKind("clock_in_output", "the values that differ are the current time",
              "leave the time out of what you compare, or mask it (tf-patches repro --ignore REGEX)", (), ""),
    CauseKind("state_left_by_run", "a later run failed or differed on something an earlier run left "
              "(a folder, a checkpoint it resumed from)",
              "make each run start clean (os.makedirs(..., exist_ok=True), a fresh output folder per run, "
              "remove the checkpoint), or run each in its own folder", (), "fresh_state"),
    CauseKind("environment", "the runs' fingerprints differ (oneDNN, threads, TF build, GPU, variables)",
              "run with the same environment: set the fields that differ the same way", (), ""),
    CauseKind("unknown", "the runs differ and no knob of repro's made them repeat",
              "keep the runs' outputs (--keep DIR) and compare them; seed and fix what you find", (), ""),
)}


def fix_text(name: str, where: str) -> str:
    """The fix line of ``name``, pointing at ``where`` when known."""
    kind = CAUSES.get(name)
    if kind is None or not kind.fix:
        return ""
    return kind.fix.format(at=f" at {where}" if where else "", at_line=f" {where}" if where else " that line",
                           at_note=f" (first drawn at {where})" if where else "")
