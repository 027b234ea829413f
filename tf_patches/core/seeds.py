"""Seeds: the range tf-patches accepts, one seed per process, and where each process's seed came from.

A process that tf-patches seeded marks its environment (``TF_PATCHES_SEEDED_BY``), so a process
it starts (a spawned data-loader worker, a multiprocessing pool) that asks for the same seed is not
seeded with it again: the same seed there would repeat the parent's streams, the duplicate-
augmentation bug of data-loader workers. Such a child gets :func:`derive_seed` of the seed and its
identity (:func:`process_identity`: multiprocessing's own, else its command line). Where
tf-patches itself fans work out (``map_isolated``, ``tf_patches.ray.map_isolated``), it gives
item *i* ``derive_seed(seed, caller, i)``. Each process's report says where its seed came from.
"""

from __future__ import annotations

import hashlib
import os
from typing import Dict, Optional, Tuple

MAX_SEED = 2**32 - 1  # NumPy's global generator takes no larger seed
DEFAULT_SEED = 0  # asking for determinism without a seed still means "the same run every time"
# "<pid>:<seed>" of the process tf-patches seeded; its children inherit the variable.
SEEDED_BY_VARIABLE = "TF_PATCHES_SEEDED_BY"
# Set by a fan-out for the one process it starts with a derived seed: how that seed was derived.
# Read once (and removed) at that process's apply_all(), so its own children do not inherit it.
ORIGIN_VARIABLE = "TF_PATCHES_SEED_ORIGIN"
_MAX_ORIGIN = 200  # characters of an origin kept for the report

_assigned: Optional[str] = None


def derive_seed(seed: int, *identity: object) -> int:
    """A reproducible seed for one worker: the same ``(seed, identity)`` gives the same seed in every
    process, run and Python version; other identities give other seeds (a 64-bit hash of both,
    folded into 0..2**32-1, NumPy's range). ``identity`` is one or more ints or strings: a worker
    id, a rank, a fold, a trial name.

    ``tf_patches.seed_everything(tf_patches.derive_seed(seed, worker_id))`` in a data loader's
    ``worker_init_fn`` gives each worker its own streams; ``map_isolated`` gives item *i*
    ``derive_seed(seed, "map_isolated", i)`` itself.
    """
    check_seed(seed)
    if not identity:
        raise TypeError("derive_seed() needs an identity: derive_seed(seed, worker_id)")
    for part in identity:
        if isinstance(part, bool) or not isinstance(part, (int, str)):
            raise TypeError(f"an identity part must be an int or a str, got {type(part).__name__}")
    text = repr((seed, *identity)).encode()  # ints and strs: the same repr everywhere
    digest = hashlib.blake2b(text, digest_size=8, person=b"tf-patches-seed").digest()
    return int.from_bytes(digest, "little") % (MAX_SEED + 1)


def check_seed(seed: object) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be from 0 to {MAX_SEED}, got {seed}")


def item_variables(seed: int, caller: str, index: int) -> Dict[str, str]:
    """The variables that give item ``index`` of a fan-out its own seed, and say where it came from."""
    derived = derive_seed(seed, caller, index)
    return {"TF_PATCHES_SEED": str(derived),
            ORIGIN_VARIABLE: f"derive_seed({seed}, {caller!r}, {index}) for {caller} items[{index}]"}


def item_settings(settings: Dict[str, object], caller: str, index: int) -> Tuple[Dict[str, object], Dict[str, str]]:
    """``apply_all`` keywords for item ``index`` of a fan-out, and the variables its process needs:
    where ``settings`` ask for determinism, the item's own seed and how it was derived (the same
    item gets the same seed locally and on Ray); else both unchanged / empty."""
    if not settings.get("deterministic"):
        return settings, {}
    seed = settings.get("seed")
    variables = item_variables(DEFAULT_SEED if seed is None else int(seed), caller, index)  # type: ignore[call-overload]
    return dict(settings, seed=int(variables["TF_PATCHES_SEED"])), variables


def assigned() -> Optional[str]:
    """How a fan-out derived this process's seed (read from its variable once, then kept), or None."""
    global _assigned
    text = os.environ.pop(ORIGIN_VARIABLE, None)
    if text is not None and text.strip():
        _assigned = " ".join(text.split())[:_MAX_ORIGIN]
    return _assigned


def seeded_parent() -> Optional[Tuple[int, int]]:
    """(pid, seed) of the process that tf-patches seeded and that started this one, or None (this
    process itself, no such process, or an unreadable variable)."""
    pid, _, seed = os.environ.get(SEEDED_BY_VARIABLE, "").partition(":")
    if not (pid.strip().isdigit() and seed.strip().isdigit()) or int(pid) == os.getpid():
        return None
    return int(pid), int(seed)


def process_identity() -> Tuple[object, ...]:
    """What tells this child process from its siblings, reproducibly from run to run:
    multiprocessing's identity (the creation order of its Process objects, ``(1,)``, ``(2,)``...,
    ``(1, 2)`` for a grandchild), or its name where only that is set yet (while a spawned child
    imports its main module), else its command line."""
    import sys

    process = sys.modules.get("multiprocessing.process")
    if process is not None:
        current = process.current_process()
        identity = getattr(current, "_identity", ())
        if identity:
            return ("multiprocessing", *identity)
        if current.name != "MainProcess":
            return ("multiprocessing", current.name)
    return ("command", *sys.argv)


def marker(seed: int) -> str:
    """The value of ``TF_PATCHES_SEEDED_BY`` for this process, seeded with ``seed``."""
    return f"{os.getpid()}:{seed}"
