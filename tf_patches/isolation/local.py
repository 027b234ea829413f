"""Containment for model-per-fold loops: run each fold in a fresh interpreter, or clear the
session state between models in this one.

Building model after model in one process (cross-validation, hyper-parameter search) makes
memory grow: 60 small Keras models +390 to +608 MB measured on TF 2.14–2.18, and from 2.14 on
``clear_session()`` after each does not contain it; a fresh process per fold does
(shared/FINDINGS.md). Users write that by hand with ``multiprocessing`` and a time-out
(shared/seeds/003_b221dd53ddd98a95.txt); :func:`run_isolated` is that, with the failure modes
reported: the child's exception re-raised with its traceback, a crash or a time-out named.
:func:`fresh_graph` is the in-process remedy, enough for graph-mode growth and older TF.
"""

from __future__ import annotations

import gc
import os
import multiprocessing
import multiprocessing.connection
import pickle
import signal
import sys
import time
import traceback
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, TypeVar

from ..core.errors import TfPatchesWarning

T = TypeVar("T")

_EXIT_GRACE_S = 30.0  # a child that sent its result but hangs on the way out is killed after this
_RESULT = "result"
_RAISED = "raised"
_KERAS_MODULES = ("keras", "tf_keras")  # Keras 2 or 3 (TF ≤ 2.15 / ≥ 2.16) and the legacy package


class IsolatedError(RuntimeError):
    """:func:`run_isolated` got no result: the child crashed, was killed or timed out, or what it
    had to send back could not be pickled. ``exitcode`` is the child's exit status when known
    (negative: the signal that ended it)."""

    def __init__(self, message: str, exitcode: Optional[int] = None):
        super().__init__(message)
        self.exitcode = exitcode


class IsolatedCrash(IsolatedError):
    """The child ended without sending a result: a signal (segfault, the out-of-memory killer's
    SIGKILL) or an exit (``os._exit``, ``sys.exit``) before ``fn`` returned."""


class IsolatedTimeout(IsolatedError):
    """The child did not finish within ``timeout`` seconds; it was killed."""


class RemoteTraceback(Exception):
    """The child's traceback, as text: the ``__cause__`` of an exception re-raised from it."""

    def __init__(self, text: str, where: str = "the child process of run_isolated"):
        super().__init__(text)
        self.text, self.where = text, where

    def __str__(self) -> str:
        return f"\n\n(in {self.where})\n{self.text}"


class IsolationWarning(TfPatchesWarning):
    """:func:`fresh_graph` could not reset the default graph (it was inside a nested graph)."""


def run_isolated(fn: Callable[..., T], *args: Any, timeout: Optional[float] = None, **kwargs: Any) -> T:
    """Call ``fn(*args, **kwargs)`` in a fresh interpreter and return its result.

    The child is started with ``spawn`` (nothing inherited but what is pickled, so whatever TF,
    Keras or the allocator keep from one model never reaches the next) and applies the same
    tf-patches patches and options as this process. ``fn``, its arguments and its result must
    pickle (``fn`` a module-level function). The child's exception is re-raised here with the
    child's traceback as its ``__cause__``; a crash raises :class:`IsolatedCrash` and a run longer
    than ``timeout`` seconds kills the child and raises :class:`IsolatedTimeout`.

    As with every ``spawn`` start, the child imports the main script again (as ``__mp_main__``):
    a script calling this must keep its work under ``if __name__ == "__main__":``.
    """
    from ..core.engine import settings  # here: importing this module stays as cheap as tf_patches

    child = _Child(fn, args, kwargs, settings(), "run_isolated", _name(fn), timeout)
    try:
        ready = multiprocessing.connection.wait(child.waitables(), child.remaining())
        kind, value = child.outcome(timed_out=not ready)
        child.close()
    finally:
        child.kill()  # no result (an interrupt here): at once
    if kind == _RESULT:
        return value
    raise _rebuild(*value)


def map_isolated(fn: Callable[[Any], T], items: Iterable[Any], *, timeout: Optional[float] = None,
                 max_in_flight: Optional[int] = None) -> List[T]:
    """``[fn(item) for item in items]``, each call in a fresh interpreter of its own (as
    :func:`run_isolated`), at most ``max_in_flight`` at a time (default: the CPU count); the
    results in the order of ``items``.

    The same contract as :func:`run_isolated`, per item: ``timeout`` counts from the start of the
    item's process. The first failure kills the processes still running, starts no more, and
    raises: the item's own exception (its traceback as ``__cause__``, which names the item's
    index, as does a note), or :class:`IsolatedCrash`/:class:`IsolatedTimeout` naming
    ``fn(items[i])``. ``tf_patches.ray.map_isolated`` is the same on a Ray cluster.
    """
    from ..core.engine import settings

    limit = _in_flight_limit(max_in_flight, os.cpu_count() or 1)
    current = settings()
    name = _name(fn)
    queue = list(enumerate(items))
    queue.reverse()  # popped from the end: items in their order
    results: Dict[int, Any] = {}
    total = len(queue)
    running: Dict[int, _Child] = {}
    try:
        while queue or running:
            while queue and len(running) < limit:
                index, item = queue.pop()
                running[index] = _Child(fn, (item,), {}, current, "map_isolated",
                                        f"{name}(items[{index}])", timeout, index)
            waitables = {w: child for child in running.values() for w in child.waitables()}
            deadlines = [r for r in (child.remaining() for child in running.values()) if r is not None]
            ready = multiprocessing.connection.wait(list(waitables), min(deadlines) if deadlines else None)
            done = {waitables[w].index: waitables[w] for w in ready}
            if not ready:  # a deadline passed: outcome() raises IsolatedTimeout for that child
                done = {index: child for index, child in running.items() if child.remaining() == 0.0}
            for index, child in sorted(done.items()):
                kind, value = child.outcome(timed_out=not ready)
                del running[index]
                child.close()
                if kind != _RESULT:
                    raise _rebuild(*value, where=child.where, index=index)
                results[index] = value
    finally:
        for child in running.values():
            child.kill()
    return [results[index] for index in range(total)]


def _in_flight_limit(max_in_flight: Optional[int], default: int) -> int:
    if max_in_flight is None:
        return max(1, default)
    if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
        raise ValueError(f"max_in_flight must be a whole number of at least 1, got {max_in_flight!r}")
    return max_in_flight


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


class _Child:
    """One spawned interpreter running one call: started at once, waited on through
    :meth:`waitables` (its pipe and its process sentinel), its outcome read once it is ready."""

    def __init__(self, fn: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                 settings: Optional[Dict[str, Any]], caller: str, label: str,
                 timeout: Optional[float], index: Optional[int] = None):
        self.caller, self.label, self.timeout, self.index = caller, label, timeout, index
        self.where = f"the child process of {caller}" + ("" if index is None else f", items[{index}]")
        try:
            payload = pickle.dumps((fn, args, kwargs))
        except Exception as exc:
            raise IsolatedError(
                f"{caller}: {label} and its arguments must pickle to reach a fresh interpreter "
                f"(a module-level function, not a lambda or a nested function): {exc}"
            ) from exc
        context = multiprocessing.get_context("spawn")
        self.receiver, sender = context.Pipe(duplex=False)
        # Not a daemon: fn may start processes of its own (Keras, tf.data workers).
        self.process = context.Process(target=_child, args=(sender, payload, settings),
                                       name=f"{caller}({label})")
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.process.start()
        sender.close()  # the child's copy is the only writer left: its death reads as end of file

    def waitables(self) -> List[Any]:
        # The sentinel too: a grandchild holding the pipe open must not hide the child's death.
        return [self.receiver, self.process.sentinel]

    def remaining(self) -> Optional[float]:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def outcome(self, timed_out: bool) -> Tuple[str, Any]:
        """What the child sent, once its pipe or sentinel is ready (``timed_out``: neither was,
        by its deadline); raises IsolatedTimeout (killing it) or IsolatedCrash when it ended
        without sending anything."""
        process = self.process
        if self.receiver.poll(0):
            try:
                return self.receiver.recv()
            except EOFError:
                pass  # the child died before sending anything
        elif timed_out:
            self.kill()
            raise IsolatedTimeout(
                f"{self.caller}: {self.label} did not finish within {self.timeout:g} s; its child "
                f"process (pid {process.pid}) was killed", process.exitcode)
        process.join()
        raise IsolatedCrash(
            f"{self.caller}: {self.label} ended without a result: its child process (pid "
            f"{process.pid}) {_describe_exit(process.exitcode)}", process.exitcode)

    def close(self) -> None:
        """The result is in (or none will come): let the child exit on its own, within a grace."""
        if self.process.exitcode is None:
            self.process.join(_EXIT_GRACE_S)
        self.kill()

    def kill(self) -> None:
        self.receiver.close()
        if self.process.is_alive():  # no result (an interrupt, another item failed) or stuck on its way out
            self.process.kill()
        self.process.join()


def _describe_exit(exitcode: int) -> str:
    """``was killed by SIGSEGV (exit status -11)``, ``exited with status 3``."""
    if exitcode >= 0:
        return f"exited with status {exitcode}"
    try:
        signame = signal.Signals(-exitcode).name
    except ValueError:
        signame = f"signal {-exitcode}"
    text = f"was killed by {signame} (exit status {exitcode})"
    if -exitcode == getattr(signal, "SIGKILL", None):
        text += "; out of memory, if nobody killed it on purpose (the kernel's OOM killer sends SIGKILL)"
    return text


def _child(sender: Any, payload: bytes, settings: Optional[Dict[str, Any]]) -> None:
    """The child's side: apply this tf-patches setup, call ``fn``, send back what came of it."""
    try:
        if settings is not None:
            from ..core.engine import apply_all

            apply_all(**settings)
        fn, args, kwargs = pickle.loads(payload)
        outcome: Tuple[str, Any] = (_RESULT, fn(*args, **kwargs))
    except Exception as exc:
        outcome = (_RAISED, _describe_exception(exc))
    try:
        sender.send(outcome)
    except Exception as exc:  # the result does not pickle: nothing was sent yet
        try:
            raise IsolatedError(f"run_isolated: the result could not be pickled back: "
                                f"{type(exc).__name__}: {exc}") from exc
        except IsolatedError as error:
            sender.send((_RAISED, _describe_exception(error)))
    sender.close()


def _describe_exception(exc: BaseException) -> Tuple[Optional[bytes], str, str]:
    """(the pickled exception, or None where it does not pickle; ``Type: message``; traceback)."""
    try:
        pickled: Optional[bytes] = pickle.dumps(exc)
    except Exception:
        pickled = None
    summary = f"{type(exc).__qualname__}: {exc}"
    return pickled, summary, "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def _rebuild(pickled: Optional[bytes], summary: str, remote_traceback: str, *,
             where: str = "the child process of run_isolated", index: Optional[int] = None) -> BaseException:
    """The child's exception, with its traceback text as the cause (``where``: the process and
    item it came from); an :class:`IsolatedError` naming it where it does not unpickle here. With
    ``index`` (map_isolated), a note names the item too (Python 3.11+)."""
    exc: Optional[BaseException] = None
    if pickled is not None:
        try:
            exc = pickle.loads(pickled)
        except Exception:
            exc = None
    if exc is None:
        exc = IsolatedError(f"{where} raised {summary} (it cannot be rebuilt here)")
    exc.__cause__ = RemoteTraceback(remote_traceback, where)
    if index is not None and hasattr(exc, "add_note"):
        exc.add_note(f"tf-patches map_isolated: raised by items[{index}] (in {where})")
    return exc


@contextmanager
def fresh_graph() -> Iterator[None]:
    """On exit, clear what models built inside leave in this process: the state of each Keras
    loaded (``keras.backend.clear_session()``), TF's default graph
    (``tf.compat.v1.reset_default_graph()``), then collect garbage. Imports neither TF nor Keras.

    ``with tf_patches.fresh_graph(): model = build(); model.fit(...)`` in a loop, or as a
    decorator. Inside a nested graph (``with graph.as_default()``, ``tf.function``) TF forbids the
    reset: it is skipped with an :class:`IsolationWarning`. On TF ≥ 2.14 eager Keras still grows
    by some MB per model; :func:`run_isolated` contains that.
    """
    try:
        yield
    finally:
        _clear_session()


def _clear_session() -> None:
    try:
        for name in _KERAS_MODULES:
            module = sys.modules.get(name)
            backend = getattr(module, "backend", None)
            if backend is not None and hasattr(backend, "clear_session"):
                backend.clear_session()
        tensorflow = sys.modules.get("tensorflow")
        if tensorflow is not None:
            tensorflow.compat.v1.reset_default_graph()
    except AssertionError as exc:  # TF's "Do not use tf.reset_default_graph() to clear nested graphs"
        warnings.warn(f"tf-patches: fresh_graph() left the default graph as it is: {exc}",
                      IsolationWarning, stacklevel=4)
    gc.collect()
