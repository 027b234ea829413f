"""Containment for model-per-fold loops: run each fold in a fresh interpreter, or clear the
session state between models in this one.

Building model after model in one process (cross-validation, hyper-parameter search) makes
memory grow: 60 small Keras models +390 to +608 MB measured on TF 2.14–2.18, and from 2.14 on
``clear_session()`` after each does not contain it; a fresh process per fold does
(shared/FINDINGS.md). Users write that by hand with ``multiprocessing`` and a time-out
(shared/seeds/003_b221dd53ddd98a95.txt); :func:`run_isolated` is that, with the failure modes
reported: the child's exception re-raised with its traceback, a crash or a time-out named, and
nothing the child started left running (each child leads a session of its own, ended as a
group). :func:`fresh_graph` is the in-process remedy, enough for graph-mode growth and older TF.

The function, its arguments and its result cross between parent and child as pickles, through
a pipe between two processes of the same user: that is not a security boundary (whoever can
write to the pipe can already run code as that user), so nothing is signed.
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
from . import processes

T = TypeVar("T")

_EXIT_GRACE_S = 30.0  # a child that sent its result but lingers on its way out is ended after this
_MAX_WAIT_S = 3600.0  # one wait at most (see _Child._wait)
_RESULT = "result"
_RAISED = "raised"
_UNREADABLE = "unreadable"  # the result came, but does not unpickle here
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
    than ``timeout`` seconds (``None`` or a positive number; else ``ValueError``) ends the child
    and raises :class:`IsolatedTimeout`.

    The child leads a session of its own: whatever it starts goes with it (so ``os.setsid()`` in
    ``fn`` fails with EPERM: use ``subprocess.Popen(..., start_new_session=True)``). A time-out,
    Ctrl-C, or a SIGTERM to this process while it waits (from the main thread) ends that whole
    process group, and the groups the child's descendants made (a nested ``map_isolated``'s
    items): SIGTERM, ≈2 s of grace, then SIGKILL. A child that exits on its own is left to exit,
    and its status is reported as it was. A SIGKILL of this process cannot be caught: its child
    then runs on to its end.

    As with every ``spawn`` start, the child imports the main script again (as ``__mp_main__``):
    a script calling this must keep its work under ``if __name__ == "__main__":``.
    """
    seconds = _checked_timeout(timeout)
    (result,) = _run_calls(fn, [(args, kwargs)], "run_isolated", seconds, limit=1, indexed=False)
    return result


def map_isolated(fn: Callable[[Any], T], items: Iterable[Any], *, timeout: Optional[float] = None,
                 max_in_flight: Optional[int] = None) -> List[T]:
    """``[fn(item) for item in items]``, each call in a fresh interpreter of its own (as
    :func:`run_isolated`), at most ``max_in_flight`` at a time (default: the CPU count); the
    results in the order of ``items``.

    The same contract as :func:`run_isolated`, per item: ``timeout`` counts from the start of the
    item's process, whatever the other items do. A process that sent its result but lingers on
    its way out keeps its place for at most 30 s, then its group is ended. The first failure
    ends the processes still running, starts no more, and raises: the item's own exception (its
    traceback as ``__cause__``, which names the item's index, as does a note), or
    :class:`IsolatedCrash`/:class:`IsolatedTimeout`/:class:`IsolatedError` naming
    ``fn(items[i])``. ``tf_patches.ray.map_isolated`` is the same on a Ray cluster.
    """
    seconds = _checked_timeout(timeout)
    limit = _in_flight_limit(max_in_flight, os.cpu_count() or 1)
    return _run_calls(fn, [((item,), {}) for item in items], "map_isolated", seconds, limit, indexed=True)


def _checked_timeout(timeout: Any) -> Optional[float]:
    """``None``, or ``timeout`` as float seconds (``inf`` for an int too large for a float: a
    deadline past the universe's end); ``ValueError`` for anything else (``inf`` and NaN too: a
    NaN deadline never passes)."""
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
    """Each ``fn(*args, **kwargs)`` of ``calls`` in a child of its own, ``limit`` at a time; their
    results in order, or the first failure raised once every child's group is ended."""
    from ..core.engine import settings  # here: importing this module stays as cheap as tf_patches

    current, name = settings(), _name(fn)
    waiting = list(enumerate(calls))
    waiting.reverse()  # popped from the end: calls in their order
    results: Dict[int, Any] = {}
    running: List[_Child] = []  # in the calls' order: the first failure is the lowest index's
    failed: Optional[_Child] = None
    stop = _Stop()
    with _Interrupts(stop.events) as interrupts:
        try:
            while (waiting or running) and failed is None and not interrupts.received:
                while waiting and len(running) < limit:
                    index, (args, kwargs) = waiting.pop()
                    label = f"{name}(items[{index}])" if indexed else name
                    child = _Child(fn, args, kwargs, current, _Call(caller, label, index, indexed), timeout, stop)
                    child.start()
                    running.append(child)
                stop.events.get()  # an outcome known, a child done, or a signal
                failed = next((child for child in running if child.failed), None)
                for child in [child for child in running if child.done and not child.failed]:
                    running.remove(child)
                    results[child.call.index] = child.value
        finally:
            stop.set(interrupted=bool(interrupts.received))
            for child in running:  # failed among them: its exit status is known once it is done
                child.join()
    if failed is not None:
        raise failed.error()
    return [results[index] for index in range(len(calls))]


class _Stop:
    """Set once, when the children still running are to be ended (a failure, an interrupt, the
    end): each child's wait sees it (a pipe made readable). ``events``: what the caller awaits."""

    def __init__(self) -> None:
        self.reader, self._writer = multiprocessing.Pipe(duplex=False)
        self.events: "queue.SimpleQueue[Any]" = queue.SimpleQueue()  # put() is safe in a signal handler
        self.interrupted = False
        self._set = threading.Event()

    def is_set(self) -> bool:
        return self._set.is_set()

    def set(self, interrupted: bool) -> None:
        if not self._set.is_set():
            self.interrupted = interrupted
            self._set.set()
            self._writer.send_bytes(b"")


class _Child(threading.Thread):
    """One call in a spawned interpreter that leads a session of its own, watched by this thread
    from its start until it is reaped: the outcome (the result, the child's death, or the
    deadline), the child's own exit (within the exit grace), then its group ended
    (:func:`processes.end`). ``stop.events`` hears of it when the outcome is known and when done."""

    def __init__(self, fn: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                 settings: Optional[Dict[str, Any]], call: _Call, timeout: Optional[float], stop: _Stop):
        super().__init__(name=f"tf-patches {call.caller}({call.label})")
        self.call, self.timeout, self._stopping = call, timeout, stop
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
        self.outcome: Optional[Tuple[str, Any]] = None  # (_RESULT | _RAISED | _UNREADABLE, ...)
        self.known = self.timed_out = self.done = False
        self._exit_fd: Optional[int] = None

    @property
    def failed(self) -> bool:
        """A failure known: a time-out, a crash, an exception (its exit status may come later)."""
        return self.timed_out or (self.known and (self.outcome is None or self.outcome[0] != _RESULT))

    @property
    def value(self) -> Any:
        assert self.outcome is not None and self.outcome[0] == _RESULT
        return self.outcome[1]

    def run(self) -> None:
        try:
            if not self._stopping.is_set():
                self._watch()
        finally:
            self.receiver.close()
            self.done = True
            self._stopping.events.put(self)

    def _watch(self) -> None:
        deadline = math.inf if self.timeout is None else time.monotonic() + self.timeout
        self.process.start()
        self._sender.close()  # the child's copy is the only writer left: its death reads as end of file
        # Its exit is awaited by its process (a pidfd), not by multiprocessing's sentinel: that is a
        # pipe, and a helper fn forked without exec holds it open until it exits.
        self._exit_fd = _exit_fd(self.process.pid)
        try:
            while not self._stopping.is_set():
                if self.receiver.poll(0) or self._exited():  # a grandchild holding the pipe hides no death
                    self.outcome = self._receive() if self.receiver.poll(0) else None  # end of file: none
                    self.known = True
                    self._stopping.events.put(self)  # a failure stops the others now
                    self._exit_within(time.monotonic() + _EXIT_GRACE_S)
                    break
                if time.monotonic() >= deadline:
                    self.timed_out = True
                    break
                self._wait(deadline, self.receiver)
            # What it left running (usually nothing), a child lingering at exit, or stopped.
            processes.end(processes.Group(self.process.pid, self._exited))
        finally:
            if self._exit_fd is not None:
                os.close(self._exit_fd)

    def _exit_within(self, grace_end: float) -> None:
        """Its own exit, left to come but for a stop (another item failed, an interrupt): a child
        that ended without a result (``sys.exit(5)`` on its way out) is left to exit, but for an
        interrupt: its own exit status is what the error reports."""
        while not self._exited() and time.monotonic() < grace_end:
            if self._stopping.is_set() and (self._stopping.interrupted or self.outcome is not None):
                return
            self._wait(grace_end)

    def _exited(self) -> bool:
        return self.process.exitcode is not None  # reaped, if it has exited

    def _wait(self, until: float, *readers: Any) -> None:
        """Until ``until``, a reader ready, the child's exit, or a stop. ``poll()`` takes no more
        than 2**31 - 1 ms (≈24.8 days): a longer wait is taken in steps; without a pidfd, the
        exit is looked for every ``POLL_S``."""
        step = _MAX_WAIT_S if self._exit_fd is not None else processes.POLL_S
        waitables = [*readers, self._stopping.reader, *([] if self._exit_fd is None else [self._exit_fd])]
        multiprocessing.connection.wait(waitables, max(0.0, min(until - time.monotonic(), step)))

    def error(self) -> BaseException:
        """The failure, once done: the child's exception rebuilt, or what came of the child."""
        call, process = self.call, self.process
        if self.timed_out:
            return IsolatedTimeout(
                f"{call.caller}: {call.label} did not finish within {self.timeout:g} s; its "
                f"process group (child pid {process.pid}) was ended", process.exitcode)
        if self.outcome is None:
            return IsolatedCrash(
                f"{call.caller}: {call.label} ended without a result: its child process (pid "
                f"{process.pid}) {_describe_exit(process.exitcode)}", process.exitcode)
        kind, detail = self.outcome
        if kind == _UNREADABLE:
            return IsolatedError(f"{call.caller}: {call.label} returned a result that cannot be unpickled "
                                 f"here: {detail}", process.exitcode)
        return _rebuild(*detail, where=call.where, index=call.index if call.indexed else None)

    def _receive(self) -> Optional[Tuple[str, Any]]:
        try:
            data = self.receiver.recv_bytes()
        except (EOFError, OSError):  # died before sending, or while sending
            return None
        try:
            return pickle.loads(data)
        except Exception as exc:  # a class this process lacks, a __setstate__ that raises here...
            return _UNREADABLE, f"{type(exc).__name__}: {exc}"


def _exit_fd(pid: int) -> Optional[int]:
    """A descriptor that is readable once ``pid`` has exited (Linux ≥ 5.3, Python ≥ 3.9), else
    None: the exit is then polled."""
    try:
        return os.pidfd_open(pid)  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return None


class _Interrupts:
    """While the children run, from the main thread: Ctrl-C (SIGINT) and SIGTERM, where they have
    their default handlers, become events (the children, each in a session of its own, must not
    run on): once their groups are ended, KeyboardInterrupt is raised, or this process dies by
    SIGTERM, as it would have. A second signal in between is only noted."""

    def __init__(self, events: "queue.SimpleQueue[Any]"):
        self.events, self.received = events, []  # type: Any, List[int]
        self._saved: Dict[int, Any] = {}

    def __enter__(self) -> "_Interrupts":
        if threading.current_thread() is threading.main_thread():
            for number, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
                try:
                    if signal.getsignal(number) is default:
                        self._saved[number] = signal.signal(number, self._note)
                except (ValueError, OSError):  # not the main interpreter
                    pass
        return self

    def _note(self, number: int, frame: Any) -> None:
        self.received.append(number)
        self.events.put(number)

    def __exit__(self, *exc_info: Any) -> None:
        for number, handler in self._saved.items():
            signal.signal(number, handler)
        if signal.SIGTERM in self.received:  # the children are ended: die by it
            os.kill(os.getpid(), signal.SIGTERM)
        if self.received:
            raise KeyboardInterrupt


def _describe_exit(exitcode: Optional[int]) -> str:
    """``was killed by SIGSEGV (exit status -11)``, ``exited with status 3``."""
    if exitcode is None:
        return "could not be reaped (stuck in the kernel)"
    if exitcode >= 0:
        return f"exited with status {exitcode}"
    text = f"was killed by {processes.signal_name(-exitcode)} (exit status {exitcode})"
    if -exitcode == getattr(signal, "SIGKILL", None):
        text += "; out of memory, if nobody killed it on purpose (the kernel's OOM killer sends SIGKILL)"
    return text


def _child(sender: Any, payload: bytes, settings: Optional[Dict[str, Any]], call: _Call) -> None:
    """The child's side: lead a session of its own (so that what ``fn`` starts can be ended with
    it), apply this tf-patches setup, call ``fn``, send back what came of it."""
    try:
        os.setsid()
    except OSError:  # a group leader already (cannot happen to a spawned child): ended by pid only
        pass
    try:
        if settings is not None:
            from ..core import engine

            if call.indexed:  # item i's own seed, not the parent's (issue 22)
                from ..core import seeds

                settings, variables = seeds.item_settings(settings, call.caller, call.index)
                os.environ.update(variables)
                seeds.assigned()  # read now: it wins over any seed asked for in this process
            if engine.settings() not in (None, settings):
                # The script, imported again as __mp_main__, applied at its top (the README's
                # pattern) with the parent's seed: the item's settings replace it.
                engine.revert_all()
            engine.apply_all(**settings)
        fn, args, kwargs = pickle.loads(payload)
        outcome: Tuple[str, Any] = (_RESULT, fn(*args, **kwargs))
    except Exception as exc:
        outcome = (_RAISED, _describe_exception(exc))
    try:
        sender.send(outcome)
    except Exception as exc:  # the result does not pickle: nothing was sent yet
        try:
            raise IsolatedError(f"{call.caller}: {call.label} returned a result that cannot be pickled "
                                f"back: {type(exc).__name__}: {exc}") from exc
        except IsolatedError as error:
            sender.send((_RAISED, _describe_exception(error)))
    sender.close()


def _describe_exception(exc: BaseException) -> Tuple[Optional[bytes], str, str]:
    """(the pickled exception, or None where it does not pickle; ``Type: message``; traceback).
    An exception whose ``__str__`` or ``__reduce__`` raises is described all the same."""
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
    """The child's exception, with its traceback text as the cause (``where``: the process and
    item it came from); an :class:`IsolatedError` naming it where it does not unpickle here. With
    ``index`` (map_isolated), a note names the item too (Python 3.11+)."""
    exc: Optional[BaseException] = None
    if pickled is not None:
        try:
            exc = pickle.loads(pickled)
        except Exception:
            exc = None
    if not isinstance(exc, BaseException):  # a __reduce__ that rebuilds something else
        exc = None
    cause = RemoteTraceback(remote_traceback, where)
    if exc is not None:
        try:
            exc.__cause__ = cause
            if index is not None and hasattr(exc, "add_note"):
                exc.add_note(f"tf-patches map_isolated: raised by items[{index}] (in {where})")
            return exc
        except Exception:  # an exception class that refuses a cause or a note
            pass
    error = IsolatedError(f"{where} raised {summary} (it cannot be rebuilt here)")
    error.__cause__ = cause
    if index is not None and hasattr(error, "add_note"):
        error.add_note(f"tf-patches map_isolated: raised by items[{index}] (in {where})")
    return error


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
