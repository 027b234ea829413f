"""A leak's live signature, as ``tf-patches diagnose`` counts it in a running program: what a
patch module declares in its ``# --- diagnose`` section, and the machinery its probe uses.

A patch module that knows its leak's signature declares ``SIGNATURE`` (a :class:`Signature`:
what one count is, its size in bytes where measured, the floor below which it has not fired,
the fix) and ``PROBE`` (a :class:`Probe` class that counts it). The registry reads both, as it
reads ``GATE``; :mod:`tf_patches.diagnosis` arms every registered probe through an
:class:`Installer` and reports what each counted.

A probe counts the leak's unit (a fresh stateful kernel, an op added to a Session's graph after
its warm-up, a callback kept…) from TensorFlow's own structures where it keeps them, at the call
where it does not. It measures the *effect*, not the call, so it reads zero where the fix is
applied, whichever was installed first: it reuses its patch's own detection code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from .context import _MISSING, raw_attribute, restore, tf_module


def by_minor(sizes: Mapping[str, int], default: Optional[int]) -> Callable[[str], Optional[int]]:
    """A unit size measured per TF minor version (``"2.12"``), else ``default`` (None: not
    measured, fitted from RSS by the report)."""

    def size(version: str) -> Optional[int]:
        return sizes.get(".".join(version.split(".")[:2]), default)

    return size


@dataclass(frozen=True)
class Signature:
    """One known leak: how its unit is counted and sized, and the fix."""

    unit: str  # what one count is, plural ("fresh stateful random kernels")
    unit_bytes: Callable[[str], Optional[int]]  # by TF version (see by_minor); None: fitted from RSS
    floor: int  # counts up to this are set-up, not a loop: the signature has not fired
    fix: str  # what the patch does about it, in a few words
    run_flags: Tuple[str, ...] = ()  # `tf-patches run` flags of the fix
    apply_kwargs: str = ""  # the same as apply_all() arguments
    patch: str = ""  # registry name of the fix (or the advisory): the registry fills it in
    # For someone who never heard of the library (issue 20): the leak in plain words, singular
    # ("a new random-op kernel kept per draw"); the fix in their own code; the fix upstream.
    name: str = ""
    code_fix: str = ""
    upstream_fix: str = ""


class Installer:
    """Replaces attributes for the probes and puts them back, only where they still hold the
    probe. A patch applied meanwhile wraps the probe and keeps working: the probe passes through
    once ``active`` is False, and is marked spent, so that whoever restores it later (the patch's
    revert, another diagnosis) restores what the probe replaced instead (:func:`context.unspent`)."""

    def __init__(self) -> None:
        self.active = True
        self._undo: List[Tuple[Any, str, Any, Any]] = []
        self._callbacks: List[Callable[[], None]] = []

    def replace(self, owner: Any, attribute: str, replacement: Callable[..., Any]) -> Any:
        original = getattr(owner, attribute)
        raw = raw_attribute(owner, attribute)
        setattr(owner, attribute, replacement)
        self._undo.append((owner, attribute, raw, replacement))
        return original

    def on_remove(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    def remove(self) -> None:
        self.active = False
        for owner, attribute, raw, replacement in reversed(self._undo):
            if getattr(owner, attribute, None) is not replacement:
                # Wrapped since by someone else: it passes through, and goes when they restore it.
                try:
                    replacement.__tf_patches_spent__ = (raw,)
                except AttributeError:
                    pass
                continue
            restore(owner, attribute, raw)
        self._undo.clear()
        for callback in self._callbacks:
            callback()
        self._callbacks.clear()


class EagerExecutions:
    """One wrapper of ``TFE_Py_FastPathExecute`` (every generated eager op goes through it) shared
    by the probes that watch eager ops by name. The hot path is one dict lookup."""

    def __init__(self) -> None:
        self.watchers: Dict[str, Callable[[tuple], None]] = {}
        self._installed = False

    def watch(self, op: str, callback: Callable[[tuple], None]) -> None:
        self.watchers[op] = callback

    def install(self, installer: Installer) -> None:
        if self._installed or not self.watchers:
            return
        pywrap_tfe = tf_module("python.pywrap_tfe")
        original = pywrap_tfe.TFE_Py_FastPathExecute
        get = self.watchers.get

        def execute(*args):
            watcher = get(args[1])
            if watcher is not None and installer.active:
                watcher(args)
            return original(*args)

        installer.replace(pywrap_tfe, "TFE_Py_FastPathExecute", execute)
        self._installed = True


class Probe:
    """Counts one signature. ``install`` may raise (a TF internal that moved): the diagnosis says
    so. ``patch`` is set to the registry name by the diagnosis that makes it."""

    patch = ""
    watches_eager_ops = False  # counts through EagerExecutions: nothing without its wrapper

    def install(self, installer: Installer, executor: EagerExecutions) -> None:
        raise NotImplementedError

    def count(self) -> int:
        raise NotImplementedError


def attribute_after(args: tuple, name: str) -> Any:
    """The value following the attribute name ``name`` in a fast-path call's arguments (names are
    str; never ``in``/``index``, whose == on a tensor would run an op)."""
    for index in range(2, len(args) - 1):
        value = args[index]
        if type(value) is str and value == name:
            return args[index + 1]
    return _MISSING
