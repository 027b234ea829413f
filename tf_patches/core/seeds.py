"""Seeds: the range tf-patches accepts, one seed per process, and where each process's seed came from.

A process that tf-patches seeded marks its environment (``TF_PATCHES_SEEDED_BY``), so a process
it starts (a spawned data-loader worker, a multiprocessing pool) that asks for the same seed is not
seeded with it again: the same seed there would repeat the parent's streams, the duplicate-
augmentation bug of data-loader workers. Such a child gets :func:`derive_seed` of the seed and its
identity (:func:`process_identity`: multiprocessing's own, else its command line). Where
tf-patches itself fans work out (``map_isolated``, ``tf_patches.ray.map_isolated``), it gives
item *i* ``derive_seed(seed, caller, i)``, which wins over any seed asked for in that process
(the script a spawned item imports again may call ``apply_all(seed=...)`` at its top). Each
process's report says where its seed came from.

The marker is parsed strictly (ASCII digits, a length cap): a malformed one is ignored with one
``ConfigWarning``, never a failed patch. It is trusted only where the pid it names is this
process's parent or an ancestor (a shell or a fork server between them), never PID 1; one that
leaked into an image or a CI step, naming some other process, is ignored. A fan-out's
``TF_PATCHES_SEED_ORIGIN`` names the process that set it, and is checked the same way (this
process or an ancestor), so a leaked one cannot override a seed asked for.
"""

from __future__ import annotations

import numbers
import operator
import os
from collections import namedtuple
from typing import Any, Dict, Optional, Set, Tuple

MAX_SEED = 2**32 - 1  # NumPy's global generator takes no larger seed
DEFAULT_SEED = 0  # asking for determinism without a seed still means "the same run every time"
# "<pid>:<seed>" of the process tf-patches seeded; its children inherit the variable.
SEEDED_BY_VARIABLE = "TF_PATCHES_SEEDED_BY"
# Set by a fan-out for the one process it starts with a derived seed: how that seed was derived.
# Read once (and removed) at that process's apply_all(), so its own children do not inherit it.
ORIGIN_VARIABLE = "TF_PATCHES_SEED_ORIGIN"
_MAX_ORIGIN = 200  # characters of an origin kept for the report
_MAX_DIGITS = 10  # a pid or a seed (at most 2**32 - 1): no longer number is read


# A collections.namedtuple: typing.NamedTuple compiles each field's annotation under `from
# __future__ import annotations` (≈60 µs a class at apply_all, issue 38).
class Assignment(namedtuple("Assignment", ("seed", "origin"))):
    """The seed a fan-out gave this process, and how it was derived (for the report): ``seed``,
    an int; ``origin``, a str."""

    __slots__ = ()


_assigned: Optional[Assignment] = None


def derive_seed(seed: int, *identity: object) -> int:
    """A reproducible seed for one worker: the same ``(seed, identity)`` gives the same seed in every
    process, run and Python version; other identities give other seeds (a 64-bit hash of both,
    folded into 0..2**32-1, NumPy's range). ``identity`` is one or more ints or strings: a worker
    id, a rank, a fold, a trial name.

    ``tf_patches.seed_everything(tf_patches.derive_seed(seed, worker_id))`` in a data loader's
    ``worker_init_fn`` gives each worker its own streams; ``map_isolated`` gives item *i*
    ``derive_seed(seed, "map_isolated", i)`` itself.
    """
    seed = check_seed(seed)
    if not identity:
        raise TypeError("derive_seed() needs an identity: derive_seed(seed, worker_id)")
    # ints and strs (a NumPy integer as its int): the same repr everywhere
    parts = tuple(part if isinstance(part, str) else _whole(part, "an identity part must be an int or a str")
                  for part in identity)
    text = repr((seed, *parts)).encode()
    import hashlib  # here: apply_all() before `import tensorflow` need not pay its 2 ms

    digest = hashlib.blake2b(text, digest_size=8, person=b"tf-patches-seed").digest()
    return int.from_bytes(digest, "little") % (MAX_SEED + 1)


def derive_from_tf_seed(seed: int, *identity: object) -> int:
    """:func:`derive_seed` of a TF global seed, which ``tf.random.set_seed`` takes beyond
    ``MAX_SEED`` (any int64): folded into 0..``MAX_SEED`` first."""
    return derive_seed(int(seed) % (MAX_SEED + 1), *identity)


def tf_global_seed() -> Tuple[Optional[int], Any]:
    """The global seed ``tf.random.set_seed`` set (the eager context's, or the default graph's in
    graph mode), and an object that is replaced at each ``set_seed`` (the context's op-seed
    generator; the graph); read without drawing an op seed (``get_seed`` would advance the
    counter). TF must be imported."""
    from tensorflow.python.eager import context  # type: ignore
    from tensorflow.python.framework import ops  # type: ignore

    if context.executing_eagerly():
        current = context.context()
        return getattr(current, "_seed", None), getattr(current, "_rng", None)
    graph = ops.get_default_graph()
    return graph.seed, graph


def check_seed(seed: object) -> int:
    """``seed`` as an int (a NumPy integer too, as ``apply_all`` takes it); ``TypeError`` for
    anything not a whole number, ``ValueError`` outside 0..``MAX_SEED``."""
    value = _whole(seed, "seed must be an int")
    if not 0 <= value <= MAX_SEED:
        raise ValueError(f"seed must be from 0 to {MAX_SEED}, got {value}")
    return value


def _whole(value: object, problem: str) -> int:
    # As options.whole_number: an Integral (NumPy's integers too), not bool; NumPy's bool_ is no
    # Integral, though NumPy before 1.25 lets operator.index() take it.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{problem}, got {type(value).__name__}")
    return int(operator.index(value))


def item_variables(seed: int, caller: str, index: int) -> Dict[str, str]:
    """The variables that give item ``index`` of a fan-out its own seed, and say where it came from."""
    assignment = item_assignment(seed, caller, index)
    return {"TF_PATCHES_SEED": str(assignment.seed),
            ORIGIN_VARIABLE: f"{os.getpid()}:{assignment.seed}:{assignment.origin}"}


def item_assignment(seed: int, caller: str, index: int) -> Assignment:
    return Assignment(derive_seed(seed, caller, index),
                      f"derive_seed({seed}, {caller!r}, {index}) for {caller} items[{index}]")


def item_settings(settings: Dict[str, object], caller: str, index: int) -> Tuple[Dict[str, object], Dict[str, str]]:
    """``apply_all`` keywords for item ``index`` of a fan-out, and the variables its process needs:
    where ``settings`` ask for determinism, the item's own seed and how it was derived (the same
    item gets the same seed locally and on Ray); else both unchanged / empty."""
    if not settings.get("deterministic"):
        return settings, {}
    seed = settings.get("seed")
    variables = item_variables(DEFAULT_SEED if seed is None else int(seed), caller, index)  # type: ignore[call-overload]
    return dict(settings, seed=int(variables["TF_PATCHES_SEED"])), variables


def assigned() -> Optional[Assignment]:
    """The seed a fan-out gave this process and how it was derived (read from its variable once,
    ``<pid>:<seed>:<origin>``, then kept), or None. A malformed variable is ignored with a
    warning; one set by a process that is neither this one nor an ancestor (leaked into an image,
    a CI step, a shell) is ignored, as a foreign ``TF_PATCHES_SEEDED_BY`` is: it must not override
    the seed this process asks for."""
    global _assigned
    text = os.environ.pop(ORIGIN_VARIABLE, None)
    if text is not None and text.strip():
        pid, _, rest = text.partition(":")
        seed, _, origin = rest.partition(":")
        pid_value, value = _decimal(pid), _decimal(seed)
        if pid_value is None or value is None or value > MAX_SEED or not origin.strip():
            _ignore(ORIGIN_VARIABLE, text, "expected <pid>:<seed>:<how it was derived>")
        elif pid_value == os.getpid() or _is_ancestor(pid_value):
            _assigned = Assignment(value, " ".join(origin.split())[:_MAX_ORIGIN])
    return _assigned


def seeded_parent() -> Optional[Tuple[int, int]]:
    """(pid, seed) of the process that tf-patches seeded and that started this one (its parent,
    or an ancestor), or None: no marker, this process's own, one naming a process that is not
    among its ancestors (leaked into an image, a CI step), or a malformed one (warned once)."""
    text = os.environ.get(SEEDED_BY_VARIABLE)
    if text is None or not text.strip():
        return None
    parsed = _marker_fields(text)
    if parsed is None:
        _ignore(SEEDED_BY_VARIABLE, text, f"expected <pid>:<seed>, each at most {_MAX_DIGITS} digits "
                                          f"(the seed at most {MAX_SEED})")
        return None
    pid, seed = parsed
    if pid == os.getpid() or not _is_ancestor(pid):
        return None
    return pid, seed


def own_seed() -> Optional[int]:
    """The seed tf-patches seeded this very process with (its own marker), or None."""
    parsed = _marker_fields(os.environ.get(SEEDED_BY_VARIABLE, ""))
    return parsed[1] if parsed is not None and parsed[0] == os.getpid() else None


def _marker_fields(text: str) -> Optional[Tuple[int, int]]:
    pid, _, seed = text.partition(":")
    pid_value, seed_value = _decimal(pid), _decimal(seed)
    if pid_value is None or seed_value is None or seed_value > MAX_SEED:
        return None
    return pid_value, seed_value


def _decimal(text: str) -> Optional[int]:
    """A short run of ASCII digits as an int (``str.isdigit`` takes '²', which ``int`` refuses;
    ``int`` refuses more than 4,300 digits too), else None."""
    text = text.strip()
    if not 0 < len(text) <= _MAX_DIGITS or not (text.isascii() and text.isdecimal()):
        return None
    return int(text)


def _ignore(variable: str, value: str, problem: str) -> None:
    from .options import warn_config  # here: options imports much; seeds is read by cheap paths

    warn_config(variable, value, problem)


def _is_ancestor(pid: int) -> bool:
    # Never PID 1: every process descends from it, so a marker naming it (leaked from a container
    # build whose shell was PID 1) would pass everywhere. The cost: the children of a seeded PID 1
    # (a container's only process) are not told from it, and get the seed they ask for.
    return pid > 1 and pid in _ancestors()


def _ancestors() -> Set[int]:
    """The pids above this process up to init, from ``/proc`` (Linux); elsewhere its parent."""
    found: Set[int] = set()
    pid = os.getppid()
    while pid > 0 and pid not in found and len(found) < 256:
        found.add(pid)
        if pid == 1:
            break
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                text = stat.read()
            pid = int(text[text.rindex(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return found


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
