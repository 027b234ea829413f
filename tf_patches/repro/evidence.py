"""What each Python process of a ``tf-patches repro`` run leaves behind, and reading it back.

Under ``TF_PATCHES_REPRO_DIR`` (set by ``repro`` for every process of a run's tree), the bootstrap
arms :func:`arm_from_environment` at interpreter start-up: at exit, the process writes
``process-<pid>.json``: its command line, its parent, its reproducibility fingerprint (where it
imported TensorFlow: :mod:`tf_patches.core.fingerprint`), the seeds it used and where they came
from (op_determinism's report row, the TF global seed, the seed variables), and its randomness: what
it drew without a seed, the seeds it set and its tf.data choices, at the user's lines
(:mod:`.recorders`, armed here with the experiment knobs). Its trap events are in
``traps-<pid>.jsonl`` already (:mod:`tf_patches.core.traps` appends one line per trap as it
springs, so a process that dies still leaves them).

Arming costs an ``atexit`` registration and the recorders' import hooks: this module imports only
the standard library, :mod:`.recorders` and :mod:`.knobs` at start-up, and the rest at exit.
"""

from __future__ import annotations

import atexit
import os
import sys

from ..session.bootstrap import REPRO_VARIABLE

VARIABLE = REPRO_VARIABLE  # the session's table; core.traps.REPRO_DIR_VARIABLE (core names no tool)
PROCESS_FILE = "process-{pid}.json"
SCHEMA = "tf-patches-repro-evidence/1"  # a process file's layout (collect()); read() skips other layouts
TRAPS_PREFIX, TRAPS_SUFFIX = "traps-", ".jsonl"  # core.traps.EVENTS_FILE
SEED_VARIABLES = ("TF_PATCHES_SEED", "TF_PATCHES_DETERMINISTIC", "TF_PATCHES_SEEDED_BY", "PYTHONHASHSEED")
_armed = False


def arm_from_environment() -> None:
    """At start-up, under ``tf-patches repro``: write this process's evidence at exit (and a
    forked child's, under its own pid, at its exit)."""
    global _armed
    if _armed or not os.environ.get(VARIABLE, "").strip():
        return
    _armed = True
    atexit.register(write)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_forked)
    _arm_recorders()


def _arm_recorders() -> None:
    """The randomness recorders and the experiment knobs, and ``--locate``'s op digests where
    asked: a failure leaves the rest of the evidence armed, said in one line."""
    try:
        from . import recorders

        recorders.arm_from_environment()
    except Exception as exc:
        _say("repro: this process's randomness is not recorded", exc)
    if os.environ.get("TF_PATCHES_REPRO_LOCATE", "").strip():  # locate.VARIABLE (not imported: start-up cost)
        try:
            from . import locate

            locate.arm_from_environment()
        except Exception as exc:
            _say("repro --locate: this process's ops are not recorded", exc)


def _say(failure: str, exc: Exception) -> None:
    if sys.stderr is not None:
        sys.stderr.write(f"tf-patches: {failure}: {type(exc).__name__}: {' '.join(str(exc).split())}\n")


class _Anchor:
    """What multiprocessing's after-fork registry holds weakly (it needs an object)."""


_anchor = _Anchor()


def _forked() -> None:
    """A forked multiprocessing worker ends with ``os._exit`` (no ``atexit``) after running its
    finalizers: one of them writes this process's evidence. Registered after fork, since the
    worker clears the finalizers it inherited before it runs the after-fork hooks."""
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        try:
            util.register_after_fork(_anchor, lambda _: util.Finalize(None, write, exitpriority=0))
        except Exception:
            pass


def write() -> None:
    """This process's evidence, written whole (a temporary file replaced): never raises."""
    directory = os.environ.get(VARIABLE, "").strip()
    if not directory:
        return
    try:
        import json

        from ..core import files

        path = os.path.join(directory, PROCESS_FILE.format(pid=os.getpid()))
        files.write_atomically(path, json.dumps(collect(), default=str), durable=False)
    except Exception:  # the run's folder went away, a field unreadable: the program's exit comes first
        pass


def collect() -> dict:
    """This process's evidence now: what ``write`` records."""
    tensorflow = "tensorflow" in sys.modules
    return {"schema": SCHEMA, "pid": os.getpid(), "ppid": os.getppid(), "argv": list(sys.argv)[:20],
            "tensorflow": tensorflow, "fingerprint": _fingerprint() if tensorflow else None,
            "seeds": _seeds(tensorflow), "randomness": _randomness()}


def _randomness() -> dict:
    try:
        from . import recorders

        return recorders.snapshot()
    except Exception as exc:
        return {"unreadable": f"{type(exc).__name__}: {exc}"}


def _fingerprint() -> object:
    try:
        from ..core.fingerprint import fingerprint

        return fingerprint()
    except Exception as exc:  # not there (an older tf-patches in the tree), or failing
        return {"unreadable": f"{type(exc).__name__}: {exc}"}


def _seeds(tensorflow: bool) -> dict:
    """The seeds this process used and where they came from."""
    seeds: dict = {"variables": {name: os.environ[name] for name in SEED_VARIABLES if name in os.environ}}
    engine = sys.modules.get("tf_patches.core.engine")
    if engine is not None:  # applied in this process: op_determinism's row says which seed and why
        try:
            for row in engine.current_report().rows:
                if row.name == "op_determinism":
                    seeds["op_determinism"] = {"status": row.status, "reason": row.reason}
        except Exception as exc:
            seeds["op_determinism"] = {"status": "unknown", "reason": f"{type(exc).__name__}: {exc}"}
    if tensorflow:
        try:
            from ..core.seeds import tf_global_seed

            seeds["tf_global_seed"] = tf_global_seed()[0]
        except Exception as exc:
            seeds["tf_global_seed"] = f"unknown: {type(exc).__name__}"
    return seeds


# -- reading a run's folder back ----------------------------------------------------------------
def read(directory: str) -> tuple:
    """(the processes' evidence, oldest pid first; the trap events of all of them, oldest first)."""
    import json

    processes, events = [], []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return [], []
    for name in names:
        path = os.path.join(directory, name)
        if name.startswith("process-") and name.endswith(".json"):
            try:
                with open(path, encoding="utf-8") as handle:
                    data = json.load(handle)
                # A process of another tf-patches (a venv in the tree) may write another layout.
                if isinstance(data, dict) and data.get("schema", SCHEMA) == SCHEMA:
                    processes.append(data)
            except (OSError, ValueError):
                continue
        elif name.startswith(TRAPS_PREFIX) and name.endswith(TRAPS_SUFFIX):
            try:
                with open(path, encoding="utf-8") as handle:
                    for line in handle:
                        try:
                            event = json.loads(line)
                        except ValueError:  # a line torn by a kill
                            continue
                        if isinstance(event, dict) and event.get("trap"):
                            events.append(event)
            except OSError:
                continue
    processes.sort(key=lambda data: data.get("pid", 0) if isinstance(data, dict) else 0)
    events.sort(key=lambda event: event.get("time") or 0)
    return [data for data in processes if isinstance(data, dict)], events
