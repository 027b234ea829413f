"""Catch a ``Session.run`` loop that adds ops to its graph: warn, or finalize the graph.

The commonest "TensorFlow leak" in graph-mode code is the loop itself adding ops on every step:
``tf.square(loss)`` written inside the loop, a ``tf.constant`` made by ``tensor * numpy_array``, a
``Saver()`` or ``iterator.get_next()`` built per step. A graph only grows: measured on TF 2.21, 2
ops added per run cost +43.9 MiB per 1,000 runs and 106 ms per run after 2,000 runs, against
0.22 ms with a fixed graph. TF's own answer, ``Graph.finalize()``, turns the offending line into
an error at once, but few people know it (docs/measurements.md, "Loops" and "Sources").
TF still says nothing on tf-nightly-cpu 2.22.0.dev20260905: +200 ops over 200 runs, no warning
(scripts/canary.py).

The patch wraps ``BaseSession.run``, which ``tf.compat.v1.Session``, ``InteractiveSession``,
``Tensor.eval`` and ``Operation.run`` all reach. Each run compares the graph's ``version`` (it
grows with every op added) with the one the previous run saw: O(1). Modes (``graph_growth_guard``):

- ``warn``: once the graph has grown before :data:`GROWING_RUNS` runs after the first
  :data:`WARMUP_RUNS`, one :class:`GraphGrowthWarning` per session: how many ops, the newest ones
  and the user's line that built them (the warning points at that line), and what to do;
- ``finalize``: finalize the graph at the session's :data:`WARMUP_RUNS`-th run, so the line that
  adds an op raises TF's own ``RuntimeError``, its message saying who finalized the graph and why;
  reverting the patch unfinalizes those graphs;
- ``off``: not installed.

``tf-patches diagnose`` wraps ``run`` with a :class:`Guard` of its own in mode ``count``: the
same test, no warning, the ops added after the warm-up summed over every session.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ..core.canary import Finding
from ..core.context import PatchContext, tf_module
from ..core.environment import Environment
from ..core.errors import TfPatchesWarning
from ..core.gate import Gate
from ..core.units import KIB
from ..core.options import Option, choice
from ..core.frames import LIBRARY_PACKAGES, package_dirs
from ..core.patch import Patch
from ..core.signature import EagerExecutions, Installer, Probe, Signature, by_minor

NAME = "graph_growth_guard"
_MODES = ("warn", "finalize", "off")
_OPTIONS = (
    Option(NAME, "TF_PATCHES_GRAPH_GROWTH", choice(*_MODES), "warn",
           "warn (default): one warning per Session whose graph keeps growing between runs; "
           "finalize: finalize each Session's graph from its 10th run, so a line adding an op "
           "raises; off: no check."),
)

WARMUP_RUNS = 10  # ops built before a session's 10th run are set-up (initialisers, savers, summaries)
GROWING_RUNS = 5  # growth before this many later runs, in a row or not (per-epoch leaks), warns
_SHOWN_OPS = 5
_SHOWN_SITES = 3
_NEW = object()  # a session not seen yet (None: a session no longer watched)


class GraphGrowthWarning(TfPatchesWarning):
    """The graph of a Session keeps growing between runs: ops are built inside the run loop."""


class _Watch:
    """One session's graph as its runs see it."""

    __slots__ = ("graph", "version", "runs", "growths", "added")

    def __init__(self, graph: Any):
        self.graph = graph
        self.version = graph.version
        self.runs = 0  # counted before each run
        self.growths = 0  # runs after the warm-up that found the graph grown
        self.added = 0  # ops added after the warm-up


class _Always:
    """A patch context that is never reverted: a guard used outside a patch (diagnose's counter)."""

    active = True


_ALWAYS = _Always()


class Guard:
    """The state of one install: the watched sessions, by ``id``, and the graphs it finalized."""

    def __init__(self, mode: str, library_dirs: Tuple[str, ...]):
        self.mode = mode
        self.watches: Dict[int, Optional[_Watch]] = {}
        self.finalized: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self.added_total = 0  # ops added after the warm-up, every session ever watched
        self._library_dirs = library_dirs
        self._lock = threading.Lock()

    def wrap(self, original: Callable[..., Any], patch: Any = None) -> Callable[..., Any]:
        """``Session.run`` watched by this guard; it passes through once ``patch`` (the installing
        ``PatchContext``) is reverted, so a bound ``sess.run`` user code kept is stock's again."""
        patch = patch if patch is not None else _ALWAYS
        watches = self.watches
        start = self.start
        step = self.step

        def run(self: Any, fetches: Any, feed_dict: Any = None, options: Any = None,
                run_metadata: Any = None) -> Any:
            if not patch.active:
                return original(self, fetches, feed_dict, options, run_metadata)
            watch = watches.get(id(self), _NEW)
            if watch is _NEW:
                watch = start(self)
            if watch is not None:
                # A local count: threads racing on the increment still see each value at most
                # once each, so the warm-up's end is never skipped.
                runs = watch.runs = watch.runs + 1
                if runs <= WARMUP_RUNS or watch.graph.version != watch.version:
                    step(self, watch, runs)
            return original(self, fetches, feed_dict, options, run_metadata)

        return run

    def start(self, session: Any) -> Optional[_Watch]:
        """Watch a session's graph from its first run; a graph finalized already cannot grow."""
        graph = session.graph
        watch = None if graph.finalized else _Watch(graph)
        with self._lock:
            if id(session) not in self.watches:
                # Keyed by id (no weakref made per run); the entry goes when the session does.
                weakref.finalize(session, self.watches.pop, id(session), None)
            self.watches[id(session)] = watch
        return watch

    def step(self, session: Any, watch: _Watch, runs: int) -> None:
        """The slow path: a run in the warm-up, or one that found the graph grown."""
        with self._lock:
            version = watch.graph.version
            grown = version - watch.version
            watch.version = version
            if runs < WARMUP_RUNS:
                return
            if runs == WARMUP_RUNS:
                if self.mode == "finalize":
                    watch.graph.finalize()
                    self.finalized.add(watch.graph)
                    self.watches[id(session)] = None
                return
            if grown <= 0:  # the graph was reset or finalized under us: nothing to say
                return
            watch.growths += 1
            watch.added += grown
            self.added_total += grown
            if self.mode == "count":  # tf-patches diagnose: count, never warn or stop watching
                return
            if watch.growths < GROWING_RUNS or self.watches.get(id(session)) is None:
                return
            self.watches[id(session)] = None
        self._warn(watch, grown)

    def _warn(self, watch: _Watch, grown: int) -> None:
        newest = watch.graph.get_operations()[-grown:][:_SHOWN_OPS]
        sites: List[Tuple[str, int, str]] = []
        for op in newest:
            site = self._user_site(op)
            if site is not None and site not in sites:
                sites.append(site)
        message = _growth_message(watch, newest, sites[:_SHOWN_SITES])
        if sites:
            filename, line, _ = sites[0]
            warnings.warn_explicit(message, GraphGrowthWarning, filename, line)
        else:  # TF recorded no user frame: point at the caller of Session.run
            warnings.warn(message, GraphGrowthWarning, stacklevel=4)

    def _user_site(self, op: Any) -> Optional[Tuple[str, int, str]]:
        """The innermost frame outside TF, Keras and tf-patches in the op's creation stack."""
        try:
            # Frames are tuples on TF 1.x, StackFrame objects that unpack alike on TF 2.x.
            for frame in reversed(list(op.traceback or ())):
                filename, line, function = tuple(frame)[:3]
                if not filename.startswith(self._library_dirs):
                    return filename, line, function
        except Exception:  # no stack recorded in a form we know: the warning goes without it
            pass
        return None

    def unfinalize(self) -> None:
        for graph in list(self.finalized):
            graph._unsafe_unfinalize()  # private; TF's own opposite of finalize()
        self.finalized.clear()


def _growth_message(watch: _Watch, newest: List[Any], sites: List[Tuple[str, int, str]]) -> str:
    runs_after = watch.runs - WARMUP_RUNS
    ops = ", ".join(f"{op.name} ({op.type})" for op in newest)
    where = "; ".join(f"{filename}:{line} in {function}" for filename, line, function in sites)
    return (
        f"tf-patches: the graph of a Session keeps growing between runs: it grew before "
        f"{watch.growths} of the {runs_after} runs after the first {WARMUP_RUNS}, by {watch.added} "
        f"ops ({watch.added / watch.growths:g} per growing run). Newest: {ops}"
        + (f", built at {where}" if where else "")
        + ". Ops built in a loop stay in the graph for good: memory grows and every run gets "
        "slower (TF 2.21, 2 ops per run: +44 MiB per 1,000 runs, 106 ms per run after 2,000). "
        "Build ops once, before the loop, and call sess.graph.finalize() there, so that TF raises "
        f"at the line that adds one ({_OPTIONS[0].env_var}=finalize does it from the "
        f"{WARMUP_RUNS}th run). Models built one after another (cross-validation, search): "
        "tf_patches.fresh_graph() or tf_patches.run_isolated(). Shown once per Session."
    )


# Appended to TF's "Graph is finalized" error for graphs the guard finalized.
_FINALIZED_NOTE = (
    f"(tf-patches finalized this graph at its Session's {WARMUP_RUNS}th run, "
    f"{_OPTIONS[0].env_var}=finalize: build every op before the run loop, or set "
    f"{_OPTIONS[0].env_var}=warn to allow it.)"
)


def precondition(env: Environment, options: Mapping[str, Any]) -> Optional[str]:
    if options.get(NAME) == "off":
        return f'off ({NAME}="off" / {_OPTIONS[0].env_var}=off)'
    return None


def install(ctx: PatchContext) -> str:
    mode = ctx.options[NAME]
    session = tf_module("python.client.session")
    guard = Guard(mode, package_dirs(LIBRARY_PACKAGES + ("tf_patches",)))
    ctx.replace_attribute(session.BaseSession, "run", guard.wrap(session.BaseSession.run, ctx))
    if mode == "finalize":
        graph_class = tf_module("python.framework.ops").Graph
        check = graph_class._check_not_finalized

        def check_not_finalized(graph: Any) -> None:
            if not ctx.active:
                return check(graph)
            try:
                check(graph)
            except RuntimeError as exc:
                if graph in guard.finalized:
                    raise RuntimeError(f"{exc} {_FINALIZED_NOTE}") from None
                raise

        ctx.replace_attribute(graph_class, "_check_not_finalized", check_not_finalized)
        ctx.on_revert("graphs finalized by the guard", guard.unfinalize)
        return f"mode finalize: each Session's graph is finalized at its {WARMUP_RUNS}th run"
    return f"mode warn: a Session whose graph grows before {GROWING_RUNS} runs after its first {WARMUP_RUNS} warns"


# --- diagnose: the live signature ---------------------------------------------------------------
_SIGNATURE = Signature(
    unit="ops added to a Session's graph after its first 10 runs",
    # docs/measurements.md, "Loops": 2 ops per run cost +43.9 MiB per 1,000 runs on 2.21.
    unit_bytes=by_minor({}, int(43.9 * 1024 * KIB / 2000)), floor=32,
    fix="build every op before the run loop; the guard names the line that adds them "
        "(finalize mode turns it into an error there)",
    options={NAME: "finalize"},
    name='an op added to the graph by every Session.run step',
    code_fix=('build every op before the loop, then call `sess.graph.finalize()`: the line that adds an op '
              'raises there'),
    upstream_fix="TensorFlow's design, not a bug: `Graph.finalize()` is its answer")


class GraphGrowth(Probe):
    """Ops added to a Session's graph after its warm-up: the guard's own test, in counting mode."""

    def __init__(self) -> None:
        self._guard: Any = None

    def install(self, installer: Installer, executor: EagerExecutions) -> None:
        session = tf_module("python.client.session")
        self._guard = guard = Guard("count", package_dirs(LIBRARY_PACKAGES + ("tf_patches",)))
        original = session.BaseSession.run
        counting = guard.wrap(original)

        sites = self.sites

        def run(session: Any, *args: Any, **kwargs: Any) -> Any:
            if not installer.active:
                return original(session, *args, **kwargs)
            before = guard.added_total
            try:
                return counting(session, *args, **kwargs)
            finally:
                grown = guard.added_total - before
                if grown > 0:
                    how = sites.tick(grown)
                    if how:  # the user's line in the newest op's creation stack, not the run's
                        sites.add(_newest_site(guard, session), grown, how)

        run.__wrapped__ = original  # type: ignore[attr-defined]
        installer.replace(session.BaseSession, "run", run)

    def count(self) -> int:
        return self._guard.added_total if self._guard is not None else 0


def _newest_site(guard: Guard, session: Any) -> Optional[Tuple[str, int, str]]:
    """Where the newest op of a session's graph was built (by the user's code), or None."""
    try:
        graph = session.graph
    except Exception:
        return None
    # By id, O(1): the newest op's id is the graph's version (TF 2.12) or one more (TF 2.21).
    for newest in (graph.version + 1, graph.version):
        try:
            return guard._user_site(graph._nodes_by_id[newest])
        except Exception:
            continue
    try:
        return guard._user_site(graph.get_operations()[-1])
    except Exception:
        return None


# --- canary: is the bug still upstream? ---------------------------------------------------------
def canary() -> Finding:
    """A Session loop that adds an op per run: TF still says nothing (no warning, no error)."""
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    c = tf.constant(2.0)
    with tf.compat.v1.Session() as sess, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        before = len(sess.graph.get_operations())
        for _ in range(200):
            sess.run(tf.square(c))  # a new op per run, the loop bug the guard catches
        grown = len(sess.graph.get_operations()) - before
    silent = not caught
    return Finding(grown >= 200 and silent, f"+{grown} ops over 200 runs, "
                                            f"{'no warning' if silent else f'{len(caught)} warning(s)'} from TF")


# --- the declaration (core/patch.py) -------------------------------------------------------------
PATCH = Patch(
    name=NAME,
    title="Session.run loops that add ops to the graph: warn, or finalize the graph",
    issue="https://www.tensorflow.org/api_docs/python/tf/Graph#finalize",
    gate=Gate(),  # BaseSession.run and Graph.version exist in every TF, 1.x and 2.x
    options=_OPTIONS,
    precondition=precondition,
    install=install,
    signature=_SIGNATURE,
    probe=GraphGrowth,
    canary=canary,
)
