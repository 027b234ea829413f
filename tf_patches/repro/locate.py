"""``tf-patches repro --locate``, inside each process of a run: a digest of every executed TF op's
outputs, in a deterministic order, so that :mod:`.located` can name the first op whose outputs
differ between runs.

Armed only where ``TF_PATCHES_REPRO_LOCATE`` holds the limit (repro sets it for its first series
of runs only) and ``TF_PATCHES_REPRO_DIR`` the run's evidence folder; it waits for TensorFlow's
import (:func:`tf_patches.core.importhook.when_loaded`) and then adds one op callback (TF's
``op_callbacks``, the hook Debugger V2 uses):

- an **eager** op's outputs are hashed in Python when it has run (their bytes, dtype and shape);
- an op **built into a graph** (``tf.function``, Keras's train step, tf.data functions, control-
  flow bodies) gets a digest computed in the graph, ``StringToHashBucketFast(SerializeTensor(t))``
  (64 bits over the bytes, dtype and shape), and its first :data:`HEAD` elements, each written by
  a ``DebugIdentityV2`` op (Debugger V2's own, FULL_TENSOR mode, stateful: automatic control
  dependencies keep it) into ``locate-<pid>/``: a few dozen bytes per op execution, never the
  tensor. The op's creation number in this process (graph construction is a topological order),
  its type, name, graph and the user's line behind it are kept in Python.

Each eager execution (an op, or a ``tf.function`` call) writes a marker into the same stream, so
a graph op's trace is placed in the call that ran it; order is (eager execution, creation number,
occurrence), never wall-clock order between threads. At the limit (ops recorded: eager ops, or
graph ops created) the recorder stops: graphs built after it are not instrumented, and the
writer's files stop at the byte budget. At exit, the stream is read back (TF's record reader)
and written as ``locate-<pid>.json``; :mod:`.located` compares runs without importing TF.

Not seen: ops inside XLA-compiled functions (``jit_compile=True``: left as they are, said in the
record). Ops inside tf.data functions are seen (measured on TF 2.12 and 2.21), from their threads:
a parallel map's values may come in another order, which :mod:`.located` does not count as a
difference. The digest stream stops at :data:`MAX_BYTES` while it is written (:mod:`._locate_budget`).
Imported at start-up under repro: Python 3.8 syntax, standard library only until TF loads.
"""

from __future__ import annotations

import os
import sys
import time
from ..session.bootstrap import REPRO_VARIABLE

VARIABLE = "TF_PATCHES_REPRO_LOCATE"  # the limit, in ops; unset: nothing recorded
DIR_VARIABLE = REPRO_VARIABLE  # evidence.VARIABLE (the session's table)
DEFAULT_LIMIT = 200_000
FILE = "locate-{pid}.json"
SCHEMA = "tf-patches-repro-locate/1"
HEAD = 4  # elements of each output kept beside its digest (the values shown where they differ)
MAX_BYTES = 40 << 20  # the raw digest stream stops here (41.9 MB; the watcher's lag measured 0.3-2.1 MB: under 50 MB)
_SKIPPED_DTYPES = frozenset(("resource", "variant"))

_state = None  # the recorder, once armed and TF loaded


def arm_from_environment() -> bool:
    """Under repro with ``--locate``: record once TensorFlow loads. Returns whether it armed."""
    text = os.environ.get(VARIABLE, "").strip()
    if not text or not os.environ.get(DIR_VARIABLE, "").strip():
        return False
    try:
        limit = max(1, int(text))
    except ValueError:
        limit = DEFAULT_LIMIT
    from ..core import importhook

    importhook.when_loaded(("tensorflow",), lambda module: _install(limit), "repro --locate's recorder")
    return True


def _install(limit: int) -> None:
    global _state
    if _state is not None:
        return
    try:
        from ._locate_tf import Recorder

        directory = os.path.join(os.environ[DIR_VARIABLE].strip(), f"locate-{os.getpid()}")
        _state = Recorder(directory, limit, HEAD, MAX_BYTES, _SKIPPED_DTYPES)
        import atexit

        atexit.register(_finish)
    except Exception as exc:
        _failed(exc)


def _finish() -> None:
    """At exit: the stream read back and written as ``locate-<pid>.json`` (never raises)."""
    if _state is None or _state.pid != os.getpid():
        return
    try:
        from ..core import files
        import json

        started = time.perf_counter()
        data = _state.collect()
        data["seconds"] = round(data.get("seconds", 0.0) + time.perf_counter() - started, 4)
        data["schema"] = SCHEMA
        path = os.path.join(os.environ[DIR_VARIABLE].strip(), FILE.format(pid=os.getpid()))
        files.write_atomically(path, json.dumps(data, separators=(",", ":")), durable=False)
    except Exception as exc:
        _failed(exc)


def _failed(exc: BaseException) -> None:
    if sys.stderr is not None:
        sys.stderr.write(f"tf-patches: repro --locate: this process's ops are not recorded: "
                         f"{type(exc).__name__}: {' '.join(str(exc).split())}\n"[:400])
