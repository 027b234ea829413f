"""Containment for model-per-fold loops: each fold in a fresh interpreter (:func:`run_isolated`,
:func:`map_isolated`), or the session state cleared between models in this one (:func:`fresh_graph`).

Model after model in one process grows memory (60 small Keras models: +390 to +608 MB on TF
2.14–2.18, which ``clear_session()`` does not contain; a fresh process per fold does:
docs/measurements.md, "Loops"). Each child leads a session of its own, watched by a thread of its own and
ended as a group (:mod:`.processes`). Function, arguments and result cross a pipe between two
processes of the same user as pickles: not a security boundary, so nothing is signed.
"""

from __future__ import annotations

import gc
import math
import multiprocessing
import multiprocessing.connection
import numbers
import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple, TypeVar

from ..core.errors import TfPatchesWarning, brief
from ..session import processes

T = TypeVar("T")

_EXIT_GRACE_S = 30.0  # a child that sent its result but lingers on its way out is ended after this
_MAX_WAIT_S = 3600.0  # one wait at most (see _Child._wait)
_RESULT = "result"
_RAISED = "raised"
_KERAS_MODULES = ("keras", "tf_keras")  # Keras 2 or 3 (TF ≤ 2.15 / ≥ 2.16) and the legacy package


class IsolatedError(RuntimeError):
    """No result: the child crashed, was killed or timed out, or its result did not pickle.
    ``exitcode``: the child's exit status when known (negative: the signal that ended it)."""

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

    The child is started with ``spawn`` (nothing inherited but what is pickled) and applies this
    process's tf-patches settings; ``fn`` (module-level), its arguments and result must pickle.
    The child's exception is re-raised here with its traceback as ``__cause__``; a crash raises
    :class:`IsolatedCrash`; past ``timeout`` seconds (``None`` or a positive number, else
    ``ValueError``) the child is ended and :class:`IsolatedTimeout` raised.

    The child leads a session of its own (``os.setsid()`` in ``fn`` fails with EPERM: use
    ``subprocess.Popen(..., start_new_session=True)``). A time-out, or a Ctrl-C or SIGTERM to this
    process while it waits (from the main thread), ends that process group and the groups its
    descendants made: SIGTERM, ≈2 s of grace, SIGKILL. A child that exits on its own is left to,
    and its status reported as it was; a SIGKILL of this process leaves it to run to its end.
    The child imports the main script again (as ``__mp_main__``): keep a script's work under
    ``if __name__ == "__main__":``.
    """
    seconds = _checked_timeout(timeout)
    (result,) = _run_calls(fn, [(args, kwargs)], "run_isolated", seconds, limit=1, indexed=False)
    return result


def map_isolated(fn: Callable[[Any], T], items: Iterable[Any], *, timeout: Optional[float] = None,
                 max_in_flight: Optional[int] = None) -> List[T]:
    """``[fn(item) for item in items]``, each call in a fresh interpreter as :func:`run_isolated`,
    at most ``max_in_flight`` at a time (default: the CPU count), ``timeout`` counted per item from
    its start; results in the order of ``items``. A process that sent its result but lingers on
    its way out keeps its place 30 s at most. The first failure ends the processes still running
    and raises: the item's own exception (its ``__cause__`` and a note name the index), or
    :class:`IsolatedCrash`/:class:`IsolatedTimeout`/:class:`IsolatedError` naming ``fn(items[i])``.
    ``tf_patches.ray.map_isolated`` is the same on a Ray cluster.
    """
    seconds = _checked_timeout(timeout)
    limit = _in_flight_limit(max_in_flight, os.cpu_count() or 1)
    return _run_calls(fn, [((item,), {}) for item in items], "map_isolated", seconds, limit, indexed=True)


def _checked_timeout(timeout: Any) -> Optional[float]:
    """``None``, or ``timeout`` as float seconds (``inf`` for an int too large for a float);
    ``ValueError`` for anything else (``inf`` and NaN too: a NaN deadline never passes)."""
    if timeout is None:
        return None
    if isinstance(timeout, numbers.Real) and not isinstance(timeout, bool) and timeout > 0:  # NaN is not
        try:
            seconds = float(timeout)
        except OverflowError:  # an int past 1e308
            return math.inf
        if math.isfinite(seconds):
            return seconds
    raise ValueError(f"timeout must be a positive, finite number of seconds, or None for no limit; "
                     f"got {brief(timeout)}")


def _in_flight_limit(max_in_flight: Optional[int], default: int) -> int:
    if max_in_flight is None:
        return max(1, default)
    if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
        raise ValueError(f"max_in_flight must be a whole number of at least 1, got {brief(max_in_flight)}")
    return max_in_flight


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


class _Call(NamedTuple):
    """Which call a child runs, for its messages (and ``index`` for what an item needs)."""

    caller: str  # "run_isolated" or "map_isolated"
    label: str  # "train" or "train(items[3])"
    index: int  # the item's index in map_isolated (0 for run_isolated's only call)
    indexed: bool  # map_isolated: name the item where the call is named

    @property
    def where(self) -> str:
        return f"the child process of {self.caller}" + (f", items[{self.index}]" if self.indexed else "")


def _run_calls(fn: Any, calls: List[Tuple[Tuple[Any, ...], Dict[str, Any]]], caller: str,
               timeout: Optional[float], limit: int, indexed: bool) -> List[Any]:
    """Each call in a child of its own, ``limit`` at a time: the results, or the first failure."""
    from ..core.engine import settings  # here: importing this module stays as cheap as tf_patches

    current, name = settings(), _name(fn)
    waiting = list(enumerate(calls))[::-1]  # popped from the end: calls in their order
    results: Dict[int, Any] = {}
    running: List[_Child] = []  # in the calls' order: the first failure is the lowest index's
    failed: Optional[_Child] = None
    stop = _Stop()
    # A Ctrl-C or SIGTERM must not leave the children running (each leads a session): they go first.
    with processes.Signals(forwarded=(), noted=("SIGINT", "SIGTERM"), wake=stop.wake) as signals:
        try:
            while (waiting or running) and failed is None and not signals.received:
                while waiting and len(running) < limit:
                    index, (args, kwargs) = waiting.pop()
                    call = _Call(caller, f"{name}(items[{index}])" if indexed else name, index, indexed)
                    running.append(_Child(fn, args, kwargs, current, call, timeout, stop))
                    running[-1].start()
                stop.events.get()  # an outcome known, a child done, or a signal
                failed = next((child for child in running if child.failed), None)
                for child in [child for child in running if child.done and failed is None]:
                    running.remove(child)
                    results[child.call.index] = _loaded(child.outcome[1], f"{caller}: {child.call.label}")
        finally:
            stop.set(interrupted=bool(signals.received))
            for child in running:  # failed among them: its exit status is known once it is done
                if child.ident is not None:
                    child.join()
            if failed is not None:  # the lowest index's failure, a time-out at the same moment included
                failed = next(child for child in running if child.failed)
    if signals.received:
        if signal.SIGTERM in signals.received:
            processes.exit_like(-signal.SIGTERM)
        raise KeyboardInterrupt
    if failed is not None:
        raise failed.error()
    return [results[index] for index in range(len(calls))]


class _Stop:
    """Set once, to end the children still running; seen by each child's wait (a pipe readable)."""

    def __init__(self) -> None:
        self.reader, self._writer = multiprocessing.Pipe(duplex=False)
        self.events: "queue.SimpleQueue[Any]" = queue.SimpleQueue()  # put() is safe in a signal handler
        self.interrupted = self.is_set = False

    def set(self, interrupted: bool) -> None:
        self.interrupted, self.is_set = self.interrupted or interrupted, True
        self._writer.send_bytes(b"")

    def wake(self, number: int) -> None:
        """A SIGINT or SIGTERM (from the signal handler): an interrupt, also one that comes during
        the stop, which then cuts the children's exit grace short."""
        self.interrupted = True
        self.events.put(number)


class _Child(threading.Thread):
    """One call in a spawned interpreter leading a session of its own, watched by this thread until
    reaped: its outcome, its own exit (within the grace), its group ended; each step to ``events``."""

    def __init__(self, fn: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                 settings: Optional[Dict[str, Any]], call: _Call, timeout: Optional[float], stop: _Stop):
        super().__init__(name=f"tf-patches {call.caller}({call.label})")
        self.call, self.timeout, self._stopping = call, timeout, stop
        self.deadline = math.inf if timeout is None else time.monotonic() + timeout  # in the calls' order
        try:
            payload = pickle.dumps((fn, args, kwargs))
        except Exception as exc:
            raise IsolatedError(
                f"{call.caller}: {call.label} and its arguments must pickle to reach a fresh interpreter "
                f"(a module-level function, not a lambda or a nested function): {exc}"
            ) from exc
        context = multiprocessing.get_context("spawn")
        self.receiver, self._sender = context.Pipe(duplex=False)
        # Not a daemon: fn may start processes of its own (Keras, tf.data workers).
        self.process = context.Process(target=_child, args=(self._sender, payload, settings, call),
                                       name=f"{call.caller}({call.label})")
        self.outcome: Optional[Tuple[str, Any]] = None  # what _outcome() gave; None: it died without
        self.known = self.timed_out = self.done = False
        self.problem: Optional[BaseException] = None
        self._exit_fd: Optional[int] = None

    @property
    def failed(self) -> bool:
        """A failure known: a time-out, a crash, an exception (its exit status may come later)."""
        return bool(self.problem) or self.timed_out or (
            self.known and (self.outcome is None or self.outcome[0] != _RESULT))

    def run(self) -> None:
        try:
            if not self._stopping.is_set:
                self._watch()
        except BaseException as exc:  # it could not start, or a bug here: said, and nothing left running
            self.problem = exc
            if self.process.pid is not None:
                processes.end(processes.Group(self.process.pid, self._exited))
        finally:
            if self._exit_fd is not None:
                os.close(self._exit_fd)
            self.receiver.close()
            self.done = True
            self._stopping.events.put(self)

    def _watch(self) -> None:
        self.process.start()
        self._sender.close()  # the child's copy is the only writer left: its death reads as end of file
        # Its exit awaited by a pidfd (else polled), not multiprocessing's sentinel: a helper forked
        # by fn holds that pipe open.
        try:
            self._exit_fd = os.pidfd_open(self.process.pid)  # type: ignore[attr-defined]
        except (AttributeError, OSError):
            pass
        while True:
            if self.receiver.poll(0) or self._exited():  # a grandchild holding the pipe hides no death
                try:  # (_RESULT, the result pickled) or (_RAISED, the exception described)
                    self.outcome = pickle.loads(self.receiver.recv_bytes()) if self.receiver.poll(0) else None
                except (EOFError, OSError):  # died before sending, or while sending
                    pass
                self.known = True
                self._stopping.events.put(self)  # a failure stops the others now
                # Its own exit, within the grace, but for a stop; a child that ended without a
                # result (sys.exit(5) on its way out) is left to exit but for an interrupt.
                grace_end = time.monotonic() + _EXIT_GRACE_S
                while not self._exited() and time.monotonic() < grace_end and not (
                        self._stopping.is_set and (self._stopping.interrupted or self.outcome is not None)):
                    self._wait(grace_end)
                break
            if time.monotonic() >= self.deadline or self._stopping.is_set:
                self.timed_out = time.monotonic() >= self.deadline
                self._stopping.events.put(self)
                break
            self._wait(self.deadline, self.receiver)
        processes.end(processes.Group(self.process.pid, self._exited))  # what it left running, or all

    def _exited(self) -> bool:
        return self.process.exitcode is not None  # reaped, if it has exited

    def _wait(self, until: float, *readers: Any) -> None:
        """Until then, a reader, the exit or a stop (in steps poll() takes: 2**31 - 1 ms at most)."""
        stopping = self._stopping
        # Once set, the stop's pipe stays readable: waited on then, it would spin. Short steps instead,
        # which also see an interrupt that comes during the stop.
        step = _MAX_WAIT_S if self._exit_fd is not None and not stopping.is_set else processes.POLL_S
        waitables = [*readers, *([] if stopping.is_set else [stopping.reader]),
                     *([] if self._exit_fd is None else [self._exit_fd])]
        multiprocessing.connection.wait(waitables, max(0.0, min(until - time.monotonic(), step)))

    def error(self) -> BaseException:
        """The failure, once done: the child's exception rebuilt, or what came of the child."""
        call, process = self.call, self.process
        if self.problem is not None:
            error = IsolatedError(f"{call.caller}: {call.label}: {type(self.problem).__name__}: {self.problem}")
            error.__cause__ = self.problem
            return error
        if self.timed_out:
            return IsolatedTimeout(
                f"{call.caller}: {call.label} did not finish within {self.timeout:g} s; its "
                f"process group (child pid {process.pid}) was ended", process.exitcode)
        if self.outcome is None:
            return IsolatedCrash(
                f"{call.caller}: {call.label} ended without a result: its child process (pid "
                f"{process.pid}) {_describe_exit(process.exitcode)}", process.exitcode)
        return _rebuild(*self.outcome[1], where=call.where, index=call.index if call.indexed else None)


def _describe_exit(exitcode: Optional[int]) -> str:
    """``was killed by SIGSEGV (exit status -11)``, ``exited with status 3``."""
    if exitcode is None:
        return "could not be reaped (stuck in the kernel)"
    if exitcode >= 0:
        return f"exited with status {exitcode}"
    oom = "; out of memory, if nobody killed it on purpose (the kernel's OOM killer sends SIGKILL)"
    return f"was killed by {processes.signal_name(-exitcode)} (exit status {exitcode})" + (
        oom if -exitcode == signal.SIGKILL else "")


def _child(sender: Any, payload: bytes, settings: Optional[Dict[str, Any]], call: _Call) -> None:
    """The child's side: lead a session of its own (so that what ``fn`` starts is ended with it),
    apply this tf-patches setup, call ``fn``, send back what came of it."""
    try:
        os.setsid()
    except OSError:  # a group leader already (cannot happen to a spawned child): ended by pid only
        pass

    def call_fn() -> Any:
        if settings is not None:
            from ..core import engine, seeds
            item = settings
            if call.indexed:  # item i's own seed, not the parent's (issue 22)
                item, variables = seeds.item_settings(settings, call.caller, call.index)
                os.environ.update(variables)
                seeds.assigned()  # read now: it wins over any seed asked for in this process
            if engine.settings() not in (None, item):  # the script, imported again as __mp_main__,
                engine.revert_all()  # applied at its top (the README's way) with the parent's seed
            engine.apply_all(**item)
        fn, args, kwargs = pickle.loads(payload)
        return fn(*args, **kwargs)

    sender.send_bytes(pickle.dumps(_outcome(call_fn, f"{call.caller}: {call.label}")))
    sender.close()


def _outcome(call_fn: Callable[[], Any], named: str) -> Tuple[str, Any]:
    """What came of ``call_fn()``, to send back (from a child or a Ray task): ``(_RESULT, it pickled)``
    or ``(_RAISED, the exception described)``, an IsolatedError for a result that does not pickle."""
    try:
        result = call_fn()
    except Exception as exc:
        return _RAISED, _describe_exception(exc)
    try:
        return _RESULT, pickle.dumps(result)
    except Exception as exc:
        error = IsolatedError(f"{named} returned a result that cannot be pickled back: {type(exc).__name__}: {exc}")
        error.__cause__ = exc
        return _RAISED, _describe_exception(error)


def _loaded(pickled: bytes, named: str) -> Any:
    """A result sent back (here and by a Ray task), unpickled; an IsolatedError where it cannot be."""
    try:
        return pickle.loads(pickled)
    except Exception as exc:  # a class this process lacks, a __setstate__ that raises here...
        raise IsolatedError(f"{named} returned a result that cannot be unpickled here: "
                            f"{type(exc).__name__}: {exc}") from exc


def _describe_exception(exc: BaseException) -> Tuple[Optional[bytes], str, str]:
    """(the exception pickled, or None; ``Type: message``; traceback), whatever its __str__ or __reduce__ do."""
    try:
        pickled: Optional[bytes] = pickle.dumps(exc)
    except Exception:
        pickled = None
    try:
        summary = f"{type(exc).__qualname__}: {exc}"
    except Exception as problem:
        summary = f"{type(exc).__qualname__} (its str() raised {type(problem).__name__})"
    try:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:  # a traceback module older than 3.11 calls str(exc) unguarded in places
        text = "".join(traceback.format_tb(exc.__traceback__)) + summary + "\n"
    return pickled, summary, text


def _rebuild(pickled: Optional[bytes], summary: str, remote_traceback: str, *,
             where: str = "the child process of run_isolated", index: Optional[int] = None) -> BaseException:
    """The child's exception, its traceback text as the cause (and, with ``index``, a note naming the
    item); an :class:`IsolatedError` naming it where it cannot be rebuilt here."""
    error = IsolatedError(f"{where} raised {summary} (it cannot be rebuilt here)")
    try:
        rebuilt = pickle.loads(pickled) if pickled is not None else None
    except Exception:
        rebuilt = None
    for exc in (rebuilt, error):
        if isinstance(exc, BaseException):  # not where a __reduce__ rebuilds something else
            try:
                exc.__cause__ = RemoteTraceback(remote_traceback, where)
                if index is not None and hasattr(exc, "add_note"):
                    exc.add_note(f"tf-patches map_isolated: raised by items[{index}] (in {where})")
                return exc
            except Exception:  # an exception class that refuses a cause or a note
                pass
    return error


@contextmanager
def fresh_graph() -> Iterator[None]:
    """On exit, clear what models built inside leave in this process: each loaded Keras's state
    (``keras.backend.clear_session()``), TF's default graph (``reset_default_graph()``), garbage.
    Imports neither TF nor Keras. ``with tf_patches.fresh_graph(): ...`` in a loop, or a decorator.
    Inside a nested graph (``graph.as_default()``, ``tf.function``) TF forbids the reset: skipped
    with an :class:`IsolationWarning`. On TF ≥ 2.14 eager Keras still grows some MB per model;
    :func:`run_isolated` contains that.
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
