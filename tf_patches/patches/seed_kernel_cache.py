"""Stable op seeds in eager mode: ends the kernel-cache leak of random ops under a global seed.

TF issue 36164 (twin: 37252), never fixed upstream. With ``tf.random.set_seed(s)`` and no op seed,
``random_seed.get_seed`` asks ``context.internal_operation_seed()`` for a fresh op seed on every
eager call; each new (seed, seed2) pair is a new kernel in the eager kernel cache, kept for good:
≈35 KiB and ≈1.8 ms more per call, measured on TF 2.12–2.21 (shared/FINDINGS.md).

The fix hands TF's own ``get_seed`` a stable op seed instead: one per *use*, derived from the
global seed and the call path (the TF functions asking, up to the first frame of user code). A
line of user code drawing in a loop then reuses one kernel, whose Philox stream goes on from call
to call as TF's stateful random kernels do; two lines, or two op kinds, get different seeds and so
different streams. Draws stay reproducible run to run but differ from unpatched TF's values.
"""

from __future__ import annotations

import hashlib
import os
import sys
from typing import Any, Dict, Optional, Tuple

from ..context import PatchContext, tf_module
from ..frames import CodeClassifier, package_dirs
from ..gate import Gate

NAME = "seed_kernel_cache"
TITLE = "Stable eager op seeds: no kernel-cache leak from random ops under a global seed"
ISSUE_URL = "https://github.com/tensorflow/tensorflow/issues/36164"
GATE = Gate(versions=">=2.0")  # present in every 2.x release measured (2.12–2.21); no fix upstream

_MAX_DEPTH = 64  # frames walked at most, a bound for pathological recursion
_MAX_CACHED = 100_000  # call paths remembered; cleared past this (exec-generated code)
_MAXINT31 = 0x7FFFFFFF


class StableSeeds:
    """Maps a call path to an op seed; the hot path is one frame walk and one dict lookup."""

    def __init__(self, library_dirs: Tuple[str, ...], passthrough_dirs: Tuple[str, ...]):
        self._frames = CodeClassifier(library_dirs)
        self._passthrough_dirs = passthrough_dirs
        self._passthrough: Dict[int, bool] = {}  # id(asking code) -> leave to stock TF
        self._seeds: Dict[tuple, int] = {}

    def op_seed(self, global_seed: Any, frame: Any) -> Optional[int]:
        """The op seed for the call path starting at ``frame`` (the function asking for seeds),
        or None where TF's own behaviour must stay: seeds passed as tensors (tf.data)."""
        asking = frame.f_code
        passthrough = self._passthrough.get(id(asking))
        if passthrough is None:
            self._frames.classify(asking)  # pins the code object behind the id
            passthrough = self._passthrough[id(asking)] = asking.co_filename.startswith(
                self._passthrough_dirs)
        if passthrough:
            return None
        known = self._frames.known
        start = frame
        path = [global_seed]
        depth = 0
        while frame is not None and depth < _MAX_DEPTH:
            code = frame.f_code
            library = known.get(id(code))
            if library is None:
                library = self._frames.classify(code)
            # f_lasti, not f_lineno: f_lineno decodes the line table on every read.
            path.append(id(code))
            path.append(frame.f_lasti)
            if not library:
                break
            frame = frame.f_back
            depth += 1
        key = tuple(path)
        seed = self._seeds.get(key)
        if seed is None:
            if len(self._seeds) >= _MAX_CACHED:
                self.clear()
            seed = self._seeds[key] = _derive(global_seed, start, depth + 1)
        return seed

    def clear(self) -> None:
        self._seeds.clear()
        self._passthrough.clear()
        self._frames.clear()


def _derive(global_seed: Any, frame: Any, depth: int) -> int:
    """A seed from the global seed and the call path, the same in every process and checkout:
    file base names, function names and line numbers, never ids or Python's salted hash()."""
    parts = [repr(global_seed)]
    for _ in range(depth):
        if frame is None:
            break
        code = frame.f_code
        parts.append(f"{os.path.basename(code.co_filename)}:{code.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    digest = hashlib.blake2b("|".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & _MAXINT31


def clear_kernel_cache(context: Any) -> None:
    """Drop cached eager kernels (and so the leaked ones); a no-op before the context exists."""
    ctx = context.context()
    if hasattr(ctx, "clear_kernel_cache"):
        ctx.clear_kernel_cache()
    elif getattr(ctx, "_context_handle", None) is not None:  # TF < 2.3 lacks the method
        from tensorflow.python import pywrap_tfe  # type: ignore

        pywrap_tfe.TFE_ContextClearCaches(ctx._context_handle)


def install(ctx: PatchContext) -> str:
    random_seed = tf_module("python.framework.random_seed")
    context = tf_module("python.eager.context")
    original = random_seed.get_seed
    executing_eagerly = context.executing_eagerly
    global_seed_of = context.global_seed
    # tf.data passes seeds as tensor inputs, which cache no kernel: leave it exactly as stock TF.
    data_dirs = tuple(os.path.join(d, "python", "data", "")
                      for d in package_dirs(("tensorflow", "tensorflow_core")))
    seeds = StableSeeds(package_dirs(), data_dirs)

    def get_seed(op_seed):
        if op_seed is None and executing_eagerly():
            global_seed = global_seed_of()
            if global_seed is not None:
                stable = seeds.op_seed(global_seed, sys._getframe(1))
                if stable is not None:
                    op_seed = stable
        return original(op_seed)

    get_seed.__doc__ = original.__doc__
    get_seed.__wrapped__ = original  # type: ignore[attr-defined]
    get_seed.__tf_patches__ = NAME  # type: ignore[attr-defined]
    bindings = ctx.replace_everywhere(random_seed, "get_seed", get_seed)
    ctx.on_revert("stable seed cache", seeds.clear)
    clear_kernel_cache(context)
    return (
        f"get_seed wrapped in {len(bindings)} binding(s); eager kernel cache cleared; "
        "draws under a global seed are reproducible but differ from unpatched TF"
    )
