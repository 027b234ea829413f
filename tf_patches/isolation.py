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
import multiprocessing
import multiprocessing.connection
import pickle
import signal
import sys
import time
import traceback
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, Optional, Tuple, TypeVar

from .errors import TfPatchesWarning

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

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f"\n\n(in the child process of run_isolated)\n{self.text}"


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
    name = getattr(fn, "__qualname__", None) or repr(fn)
    try:
        payload = pickle.dumps((fn, args, kwargs))
    except Exception as exc:
        raise IsolatedError(
            f"run_isolated: {name} and its arguments must pickle to reach a fresh interpreter "
            f"(a module-level function, not a lambda or a nested function): {exc}"
        ) from exc
    from .engine import settings  # here: importing this module stays as cheap as tf_patches

    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    # Not a daemon: fn may start processes of its own (Keras, tf.data workers).
    process = context.Process(target=_child, args=(sender, payload, settings()),
                              name=f"run_isolated({name})")
    deadline = None if timeout is None else time.monotonic() + timeout
    process.start()
    sender.close()  # the child's copy is the only writer left: its death reads as end of file
    try:
        kind, value = _receive(receiver, process, deadline, name, timeout)
        process.join(_EXIT_GRACE_S)  # the result is in: let the child exit on its own
    finally:
        receiver.close()
        if process.is_alive():  # no result (an interrupt here), or a child stuck on its way out
            process.kill()
        process.join()
    if kind == _RESULT:
        return value
    raise _rebuild(*value)


def _receive(receiver: Any, process: Any, deadline: Optional[float], name: str,
             timeout: Optional[float]) -> Tuple[str, Any]:
    # The sentinel too: a grandchild holding the pipe open must not hide the child's death.
    remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
    ready = multiprocessing.connection.wait([receiver, process.sentinel], remaining)
    if not ready:
        process.kill()
        process.join()
        raise IsolatedTimeout(
            f"run_isolated: {name} did not finish within {timeout:g} s; its child process "
            f"(pid {process.pid}) was killed", process.exitcode)
    if receiver in ready or receiver.poll(0):
        try:
            return receiver.recv()
        except EOFError:
            pass  # the child died before sending anything
    process.join()
    raise IsolatedCrash(
        f"run_isolated: {name} ended without a result: its child process (pid {process.pid}) "
        f"{_describe_exit(process.exitcode)}", process.exitcode)


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
            from .engine import apply_all

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


def _rebuild(pickled: Optional[bytes], summary: str, remote_traceback: str) -> BaseException:
    """The child's exception, with its traceback text as the cause; an :class:`IsolatedError`
    naming it where it does not unpickle here."""
    exc: Optional[BaseException] = None
    if pickled is not None:
        try:
            exc = pickle.loads(pickled)
        except Exception:
            exc = None
    if exc is None:
        exc = IsolatedError(f"run_isolated: the child raised {summary} (it cannot be rebuilt here)")
    exc.__cause__ = RemoteTraceback(remote_traceback)
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
