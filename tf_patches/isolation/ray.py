"""tf-patches on a Ray cluster (``pip install tf-patches[ray]``): the patches in every worker
process of a job, and process-per-item containment for model-per-fold loops.

A Ray worker is a long-lived process reused by task after task, so the model-loop and seed leaks
pile up in it until it is killed for memory. :func:`runtime_env` patches every worker of a job
(or of one task, actor or Tune trainable); :func:`map_isolated` runs each item in a fresh worker
process, as :func:`tf_patches.map_isolated` does on one machine.

How the patches reach a worker: the settings (a :class:`tf_patches.Settings`) travel as its
``TF_PATCHES_*`` environment variables (``Settings.to_environ``; ``env=`` inline, as JSON), and
Ray's worker set-up hook, ``tf_patches.ray.worker_setup``, arms the auto-apply bootstrap when the
worker process starts, before any task's function or arguments are unpickled (they may import
TensorFlow): ``apply_all()`` then runs when the worker starts importing TensorFlow, as under
``tf-patches run``. The hook is named by module path, so
it works wherever tf-patches is installed on the cluster's machines (no driver-side path), and
a worker that cannot import ``tf_patches`` fails at start, its task with
``ray.exceptions.WorkerCrashedError`` and the raylet's line naming the import error, instead of
running unpatched.

Importing this module does not import Ray; :func:`map_isolated` does.
"""

from __future__ import annotations

import math
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Mapping, Optional, TypeVar

if TYPE_CHECKING:
    from ..core.settings import Settings

T = TypeVar("T")

# Ray's worker set-up hook, as the variable its default worker reads at start-up (Ray ≥ 2.8).
# Set as a variable rather than as the runtime_env field ``worker_process_setup_hook``: Ray turns
# the field into this variable only for a job's runtime_env (``ray.init``) and silently ignores it
# in a task's, actor's or Tune trainable's, while the variable works at every level (measured on
# ray 2.60.0).
SETUP_HOOK_VARIABLE = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"
SETUP_HOOK = "tf_patches.ray.worker_setup"


def runtime_env(settings: Optional["Settings"] = None, /, **options: Any) -> Dict[str, Any]:
    """A Ray ``runtime_env`` that makes every worker process it reaches apply tf-patches with
    these options (a :class:`tf_patches.Settings`, and/or ``apply_all()``'s keywords, checked the
    same way: a bad one raises ``ValueError``/``TypeError`` here; a keyword wins over the
    Settings' value) when it imports TensorFlow.

    ``ray.init(runtime_env=tf_patches.ray.runtime_env(deterministic=True, seed=0))``, or merged
    into a task's, actor's or trainable's own (its ``env_vars`` merged with yours).
    """
    return {"env_vars": variables(options, settings)}


def variables(options: Mapping[str, Any], settings: Optional["Settings"] = None) -> Dict[str, str]:
    """The environment variables of :func:`runtime_env`: a ``TF_PATCHES_*`` variable for each
    option given, and Ray's set-up hook."""
    from ..core.engine import ASSUME_VARIABLE, environment_argument
    from ..core.settings import Settings

    given = dict(options)
    env = environment_argument(given.pop("env", None))  # as apply_all(env=...) checks it
    chosen = Settings.from_kwargs(given).merged(settings)  # apply_all()'s own check, and its messages
    if chosen.malloc is not None or chosen.hash_seed is not None:  # preloads and start-up variables of tf-patches run
        raise ValueError(f"{chosen!r}: malloc and hash_seed act where tf-patches run starts a command; "
                         "a Ray worker takes the apply_all options only")
    result = {SETUP_HOOK_VARIABLE: SETUP_HOOK, **chosen.to_environ()}
    if env is not None:
        result[ASSUME_VARIABLE] = env.to_json_text()  # inline: a driver's file is not on the workers
    return result


_RAY_ORIGIN = "ray"  # an item origin's first field where map_isolated runs it on Ray


def worker_setup() -> None:
    """Ray's worker set-up hook: arm the bootstrap in this worker, as its ``sitecustomize`` does
    under ``tf-patches run`` (apply at ``import tensorflow``, options from ``TF_PATCHES_*``), or
    apply now if TensorFlow is imported already. Errors propagate: Ray then stops the worker and
    its task fails, rather than running unpatched.

    A worker's seed is the one its ``runtime_env`` names (you seeded the workers so), never one
    derived because the driver that started a local cluster was seeded: Ray's processes inherit
    the driver's environment, not its place as their parent (``map_isolated`` derives each item's)."""
    from ..session import bootstrap
    from ..core import seeds

    os.environ.pop(seeds.SEEDED_BY_VARIABLE, None)
    _own_item_origin(seeds.ORIGIN_VARIABLE)
    bootstrap.arm()


def _own_item_origin(variable: str) -> None:
    """A worker is no descendant of the driver whose ``map_isolated`` named its item's seed
    origin, so the ancestry check would drop a ``<pid>:<seed>:<how>`` origin: ``_for_item``
    writes ``ray:<seed>:<how>`` instead, which only this hook (run in a worker of a runtime_env
    that tf-patches built) takes, stamped with the worker's pid, and only beside the
    ``TF_PATCHES_SEED`` it explains. (Asking Ray for the task's runtime_env here crashes the
    worker: its context is not set up yet.)"""
    value = os.environ.get(variable) or ""
    marker, _, rest = value.partition(":")
    if marker == _RAY_ORIGIN and rest.partition(":")[0] == os.environ.get("TF_PATCHES_SEED"):
        os.environ[variable] = f"{os.getpid()}:{rest}"


def map_isolated(fn: Callable[[Any], T], items: Iterable[Any], *, timeout: Optional[float] = None,
                 max_in_flight: Optional[int] = None) -> List[T]:
    """``[fn(item) for item in items]``, each call a Ray task in a fresh worker process
    (``max_calls=1``, never retried), with this process's patch settings
    (``tf_patches.settings``); the results in the order of ``items``. On whatever cluster
    ``ray.init()`` connected to (it is called with no arguments when Ray is not initialised).

    The contract of :func:`tf_patches.map_isolated`: the first failure cancels the tasks not done
    and raises: the item's own exception (its traceback as ``__cause__``, naming the item's
    index), :class:`tf_patches.IsolatedCrash` when its worker died (killed, out of memory, a
    segfault, or a worker that could not start, e.g. without tf-patches),
    :class:`tf_patches.IsolatedTimeout` past ``timeout`` seconds from the item's submission (a
    positive, finite number, or None; else ``ValueError``, before anything starts), or
    :class:`tf_patches.IsolatedError` for a result that does not pickle (it travels as a
    pickle, as locally). ``max_in_flight`` (default: the cluster's CPUs) bounds the tasks
    submitted at once.
    """
    from .local import _MAX_WAIT_S, IsolatedTimeout, _checked_timeout, _in_flight_limit, _name

    seconds = _checked_timeout(timeout)  # checked before Ray starts: a bad call starts nothing
    if max_in_flight is not None:
        _in_flight_limit(max_in_flight, 1)

    import ray

    from ..core.engine import settings

    if not ray.is_initialized():
        ray.init()
    current = settings()
    task_options: Dict[str, Any] = {"max_calls": 1, "max_retries": 0, "retry_exceptions": False}
    if current is not None:  # else the job's own runtime_env (if any) decides, as for any task
        task_options["runtime_env"] = runtime_env(**current)
    remote = ray.remote(**task_options)(_call)
    limit = _in_flight_limit(max_in_flight, int(ray.cluster_resources().get("CPU", 1)))
    name = _name(fn)
    fn_ref = ray.put(fn)
    queue = list(enumerate(items))
    queue.reverse()
    total = len(queue)
    results: Dict[int, Any] = {}
    running: Dict[Any, tuple] = {}  # ObjectRef → (index, deadline)
    try:
        while queue or running:
            while queue and len(running) < limit:
                index, item = queue.pop()
                deadline = math.inf if seconds is None else time.monotonic() + seconds
                running[_for_item(remote, current, index).remote(fn_ref, item, index, name)] = (index, deadline)
            # Until the nearest deadline, in steps that Ray's wait (milliseconds, like poll()) takes.
            wait_s = min(deadline for _, deadline in running.values()) - time.monotonic()
            ready, _ = ray.wait(list(running), num_returns=1,
                                timeout=None if wait_s == math.inf else min(max(0.0, wait_s), _MAX_WAIT_S))
            for ref in ready:
                index, _ = running.pop(ref)
                results[index] = _result(ray, ref, f"{name}(items[{index}])", index)
            now = time.monotonic()
            for ref, (index, deadline) in list(running.items()):
                if now >= deadline:
                    del running[ref]
                    ray.cancel(ref, force=True)
                    raise IsolatedTimeout(f"map_isolated: {name}(items[{index}]) did not finish within "
                                          f"{seconds:g} s; its Ray task was cancelled and its worker killed")
    finally:
        for ref in running:
            ray.cancel(ref, force=True)
    return [results[index] for index in range(total)]


def _for_item(remote: Any, current: Optional[Dict[str, Any]], index: int) -> Any:
    """The task for item ``index``: with determinism asked for, its own seed, as locally."""
    from ..core import seeds

    if current is None:
        return remote
    item, variables = seeds.item_settings(current, "map_isolated", index)
    if not variables:
        return remote
    env = runtime_env(**item)
    _, _, rest = variables[seeds.ORIGIN_VARIABLE].partition(":")  # this pid means nothing there
    env["env_vars"][seeds.ORIGIN_VARIABLE] = f"{_RAY_ORIGIN}:{rest}"
    return remote.options(runtime_env=env)


def _result(ray: Any, ref: Any, label: str, index: int) -> Any:
    """The item's result, or its failure raised as tf_patches.map_isolated raises it."""
    from .local import _RESULT, IsolatedCrash, IsolatedError, _loaded, _rebuild

    try:
        kind, value, pid = ray.get(ref)
    except (ray.exceptions.WorkerCrashedError, ray.exceptions.OutOfMemoryError,
            ray.exceptions.NodeDiedError) as exc:
        raise IsolatedCrash(
            f"map_isolated: {label} ended without a result: its Ray worker died "
            f"({type(exc).__name__}: {' '.join(str(exc).split())}); killed (SIGKILL: out "
            f"of memory, if nobody killed it on purpose), crashed, or failed to start "
            f"(a worker that cannot import tf_patches does: see the raylet's line above)"
        ) from exc
    except ray.exceptions.RayError as exc:
        raise IsolatedError(f"map_isolated: {label}: Ray gave no result: {exc}") from exc
    if kind != _RESULT:
        raise _rebuild(*value, where=f"Ray worker pid {pid} of map_isolated, items[{index}]", index=index)
    return _loaded(value, f"map_isolated: {label}")


def _call(fn: Callable[[Any], Any], item: Any, index: int, name: str) -> tuple:
    """The task: ``fn(item)`` in this worker, what came of it as run_isolated's child sends it (a
    result that does not unpickle on the driver is then named as locally, not lost in Ray's)."""
    from .local import _outcome

    return (*_outcome(lambda: fn(item), f"map_isolated: {name}(items[{index}])"), os.getpid())
