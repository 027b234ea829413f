"""Eager tf.py_function reuses its kernels and frees its callbacks: no growth per call.

TF issues 35010 and 51839, open. Every eager ``tf.py_function`` call registers its callback under
a new token (``pyfunc_<n>``) and runs an ``EagerPyFunc`` op with that token as an attribute, so
(1) the eager kernel cache keeps one new kernel per call, and (2) the callback, kept by the global
graph's ``_py_funcs_used_in_graph`` list, is never freed. Measured (``benchmarks/``, 5,000
calls): 39,700 KiB per 1,000 calls on TF 2.21.0 and 43,000 on 2.12.1, ≈1 ms per call (issue 9:
146–181 MB per 4,000 calls on every release 2.12–2.21); patched, 8 and 90 KiB, ≈5× faster.
Still there on tf-nightly-cpu 2.22.0.dev20260905: 37,691 KiB per 1,000 calls unpatched (scripts/canary.py).

The fix runs the same TF code with a token taken from a pool, registered for the call only: the
pooled token's kernel is reused, the callback freed after the call. A token reaches nothing else
unless a tape records the op (the gradient finds the forward pass's tape by token), so the pool is
used only where nothing can record (``could_possibly_record()`` is False, the very test TF's
``EagerFunc`` applies) and execution is synchronous (an async op may run after the call returns);
otherwise TF's own path runs, leak included. Results, dtypes, shapes and errors come from the same
kernel and code; only the number in an error's ``pyfunc_<n>`` can differ, as it does from call to
call.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Dict, List, Optional, Tuple

from ..core.canary import Finding, per_1000
from ..core.context import PatchContext, tf_module
from ..core.gate import Gate
from ..core.patch import Patch
from ..core.units import KIB
from ..core.signature import EagerExecutions, Installer, Probe, Signature, attribute_after, by_minor
from ._py_funcs import release_from_graph


class _Pending(threading.local):
    """The pooled token the next registration on this thread takes, if any."""

    token: Optional[str] = None


def _could_possibly_record() -> Any:
    """The tape test TF's EagerFunc applies (eager.tape on 2.12, eager.record since)."""
    try:
        return tf_module("python.eager.record").could_possibly_record
    except ImportError:
        return tf_module("python.eager.tape").could_possibly_record


_Arguments = Tuple[Tuple[Any, ...], Dict[str, Any]]


def _detached(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> _Arguments:
    """The call's arguments with the function (first, or ``func=``) behind a ``functools.partial``.

    TF sets ``func.ag_dnc_wrapper__ = <this call's callback>`` on a plain function, and the next
    call's autograph wrapper copies ``func.__dict__`` (``functools.update_wrapper``), the previous
    callback included: a chain through every call of a named function (measured, 2.21: +630 B per call
    once the kernels are reused). A partial gets neither, and calls ``func`` with no frame of its
    own, so tracebacks in TF's error messages read as before.
    """
    if args and callable(args[0]):
        return (functools.partial(args[0]),) + args[1:], kwargs
    if callable(kwargs.get("func")):
        return args, {**kwargs, "func": functools.partial(kwargs["func"])}
    return args, kwargs  # no function (decorator form) or not callable: TF decides, as before


def install(ctx: PatchContext) -> str:
    script_ops = tf_module("python.ops.script_ops")
    context = tf_module("python.eager.context")
    ops = tf_module("python.framework.ops")
    could_possibly_record = _could_possibly_record()
    registry = script_ops._py_funcs
    pending = _Pending()
    free: List[str] = []  # tokens not in use; one per concurrent (or nested) call at most
    # What the replacements fall back on, read before either is installed: a tf.py_function
    # from another thread may reach them the moment they are (issue 32: 'NoneType' not callable).
    next_unique_token = registry._next_unique_token
    original = script_ops.eager_py_func

    def next_token() -> str:
        if not ctx.active:
            return next_unique_token()
        token = pending.token
        if token is None:
            return next_unique_token()
        pending.token = None
        return token

    def eager_py_func(*args, **kwargs):
        # Not active: reverted, and held by user code. Recording or async: TF's own path.
        if not ctx.active or not context.executing_eagerly() or context.is_async() or could_possibly_record():
            return original(*args, **kwargs)
        try:
            token = free.pop()
        except IndexError:
            token = next_unique_token()  # TF's own form, so messages keep their shape
        args, kwargs = _detached(args, kwargs)
        pending.token = token
        try:
            return original(*args, **kwargs)
        finally:
            pending.token = None  # not taken where the call failed before registering
            callback = registry.get(token)
            if callback is not None:
                registry.remove(token)
                release_from_graph(ops.get_default_graph(), callback)
            free.append(token)

    ctx.replace_attribute(registry, "_next_unique_token", next_token)
    bindings = ctx.replace_everywhere(script_ops, "eager_py_func", eager_py_func, api_only=True)
    ctx.on_revert("pooled py_function tokens", free.clear)
    return (
        f"tf.py_function wrapped in {len(bindings)} binding(s); eager calls with no tape "
        "recording reuse pooled tokens and free their callbacks"
    )


# --- diagnose: the live signature ---------------------------------------------------------------
_SIGNATURE = Signature(
    unit="eager tf.py_function calls, each a new kernel and a callback kept",
    # This module's docstring: 39,700 KiB per 1,000 calls on 2.21.0, 43,000 on 2.12.1.
    unit_bytes=by_minor({"2.12": 43_000 * KIB // 1000}, 39_700 * KIB // 1000), floor=16,
    fix="pooled tokens: kernels reused, callbacks freed",
    name='a new kernel and a kept callback per eager tf.py_function call',
    code_fix=('in eager code call the Python function directly, or keep the tf.py_function inside a '
              '`tf.function` that is traced once'),
    upstream_fix='open upstream (TF 35010, 51839): no TensorFlow release fixes it')


class FreshPyFuncTokens(Probe):
    """An eager ``EagerPyFunc`` op run with a token never seen (a new kernel, a callback kept);
    the patch reuses pooled tokens."""

    watches_eager_ops = True

    def __init__(self) -> None:
        self._tokens: set = set()

    def install(self, installer: Installer, executor: EagerExecutions) -> None:
        tokens = self._tokens
        sites = self.sites

        def eager_py_func(args: tuple) -> None:
            token = attribute_after(args, "token")
            if (type(token) is str or type(token) is bytes) and token not in tokens:
                tokens.add(token)
                sites.hit()

        executor.watch("EagerPyFunc", eager_py_func)

    def count(self) -> int:
        return len(self._tokens)


# --- canary: is the bug still upstream? ---------------------------------------------------------
def canary() -> Finding:
    import tensorflow as tf

    x = tf.constant(1.0)
    kib = per_1000(lambda: tf.py_function(lambda v: v + 1, [x], tf.float32), 1500, 100)
    return Finding(kib > 1000, f"{kib:,.0f} KiB per 1,000 eager tf.py_function calls")


# --- the declaration (core/patch.py) -------------------------------------------------------------
PATCH = Patch(
    name="eager_py_function",
    title="Eager tf.py_function reuses its kernels: no growth per call",
    issue="https://github.com/tensorflow/tensorflow/issues/35010",
    # Measured on 2.12.1 and 2.21.0, reproduced on every release between (issue 9); open upstream.
    gate=Gate(versions=">=2.12"),
    install=install,
    signature=_SIGNATURE,
    probe=FreshPyFuncTokens,
    canary=canary,
)
