"""A leak's live signature, as ``tf-patches diagnose`` counts it in a running program: what a
patch module declares in its ``# --- diagnose`` section, and the machinery its probe uses.

A patch module that knows its leak's signature declares ``signature=`` (a :class:`Signature`:
what one count is, its size in bytes where measured, the floor below which it has not fired,
the fix) and ``probe=`` (a :class:`Probe` class that counts it) in its ``Patch``
(:mod:`tf_patches.core.patch`), beside its ``gate``; :mod:`tf_patches.diagnosis` arms every
registered probe through an :class:`Installer` and reports what each counted.

A probe counts the leak's unit (a fresh stateful kernel, an op added to a Session's graph after
its warm-up, a callback kept…) from TensorFlow's own structures where it keeps them, at the call
where it does not. It measures the *effect*, not the call, so it reads zero where the fix is
applied, whichever was installed first: it reuses its patch's own detection code.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from .context import _MISSING, raw_attribute, restore, tf_module
from .records import Record
from .settings import FixOptions


# The options key a diagnosis adds when it checks which probes to arm (spec.check): a signature
# without a patch (patches/retracing.py) arms its probe only then, and apply_all lists it skipped.
DIAGNOSING = "__diagnosing__"


def by_minor(sizes: Mapping[str, int], default: Optional[int]) -> Callable[[str], Optional[int]]:
    """A unit size measured per TF minor version (``"2.12"``), else ``default`` (None: not
    measured, fitted from RSS by the report)."""

    def size(version: str) -> Optional[int]:
        return sizes.get(".".join(version.split(".")[:2]), default)

    return size


class Signature(Record, FixOptions):
    """One known leak: how its unit is counted and sized, and the fix. (A Record: a frozen
    dataclass's behaviour, ``options`` compared but not hashed, issue 38.)"""

    __slots__ = _fields = _compared = _shown = __match_args__ = (
        "unit", "unit_bytes", "floor", "fix", "options", "patch", "name", "code_fix", "upstream_fix")
    _hashed = ("unit", "unit_bytes", "floor", "fix", "patch", "name", "code_fix", "upstream_fix")
    unit: str  # what one count is, plural ("fresh stateful random kernels")
    unit_bytes: Callable[[str], Optional[int]]  # by TF version (see by_minor); None: fitted from RSS
    floor: int  # counts up to this are set-up, not a loop: the signature has not fired
    fix: str  # what the patch does about it, in a few words
    # The fix's apply_all() keywords beyond the defaults ({"graph_growth_guard": "finalize"}): the
    # `tf-patches run` flags and the apply_all() arguments a report gives are derived from them.
    options: Mapping[str, Any]
    patch: str  # registry name of the fix (or the advisory): the registry fills it in
    # For someone who never heard of the library (issue 20): the leak in plain words, singular
    # ("a new random-op kernel kept per draw"); the fix in their own code; the fix upstream.
    name: str
    code_fix: str
    upstream_fix: str

    def __init__(self, unit: str, unit_bytes: Callable[[str], Optional[int]], floor: int, fix: str,
                 options: Optional[Mapping[str, Any]] = None, patch: str = "", name: str = "",
                 code_fix: str = "", upstream_fix: str = "") -> None:
        self._assign(unit, unit_bytes, floor, fix, {} if options is None else options, patch, name, code_fix,
                     upstream_fix)


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
            # What the owner itself holds: a staticmethod (Model.__new__) reads as its function.
            current = raw_attribute(owner, attribute)
            if current is _MISSING:
                current = getattr(owner, attribute, None)
            if current is not replacement:
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


Site = Tuple[str, int, str]  # the user's frame: filename, line, function


class Sites:
    """The user's lines that make a signature's units (the first frame outside TF, Keras and
    tf-patches), sampled so that a loop's cost stays flat: the first :data:`EXACT` events are
    attributed exactly, then every :data:`EVERY`-th; the units of the events in between are shared
    out in proportion to the sampled ones (they come from the same loop as a rule), so the counts
    add up to the units seen. A probe calls :meth:`hit` where it counts a unit, with the unit's
    maker on the stack, or :meth:`tick` then :meth:`add` where the site is known otherwise (an
    op's creation traceback)."""

    EXACT = 16
    EVERY = 64
    KEPT = 5  # sites reported, most frequent first
    EXACTLY, SAMPLED = 1, 2  # what tick() says of an event (0: neither, not recorded)

    def __init__(self, locate: Callable[[Any], Optional[Site]]):
        self._locate = locate  # a stack frame -> the user's site behind it (diagnosis.sites)
        self.events = 0
        self.units = 0
        # site (None: no user frame found) -> units, for the exact events and the sampled ones
        self._exact: Dict[Optional[Site], int] = {}
        self._sampled: Dict[Optional[Site], int] = {}
        self._lock = threading.Lock()

    def tick(self, units: int = 1) -> int:
        """Count one event of ``units`` units: :data:`EXACTLY`, :data:`SAMPLED` or 0 (not recorded)."""
        self.units += units
        events = self.events = self.events + 1
        if events <= self.EXACT:
            return self.EXACTLY
        return 0 if events % self.EVERY else self.SAMPLED

    def hit(self, units: int = 1) -> None:
        """One event, its maker the caller's stack (walked only when recorded)."""
        how = self.tick(units)
        if how:
            try:
                site = self._locate(sys._getframe(1))
            except Exception:
                site = None
            self.add(site, units, how)

    def add(self, site: Optional[Site], units: int, how: int) -> None:
        if how:
            with self._lock:
                bucket = self._exact if how == self.EXACTLY else self._sampled
                bucket[site] = bucket.get(site, 0) + units

    def reset(self) -> None:
        """Forget every event (a forked child counts its own); the lock is new, as after a fork."""
        self._lock = threading.Lock()
        self.events = self.units = 0
        self._exact, self._sampled = {}, {}

    def top(self) -> List[list]:
        """``[[filename, line, function, units], ...]``, most first, at most :data:`KEPT`. Units
        made, which may exceed the signature's count where that is a peak (seed_kernel_cache)."""
        with self._lock:
            exact, sampled, units = dict(self._exact), dict(self._sampled), self.units
        rest = units - sum(exact.values())  # units of the events after the exact ones
        share = sampled if sampled else exact  # who made them: the sampled events, else the exact
        share_total = sum(share.values())
        counts: Dict[Optional[Site], float] = dict(exact)
        for site, found in share.items():
            if rest > 0 and share_total:
                counts[site] = counts.get(site, 0) + found * rest / share_total
        ranked = sorted(((site, round(n)) for site, n in counts.items() if site is not None),
                        key=lambda item: (-item[1], item[0]))
        return [[filename, line, function, n] for (filename, line, function), n in ranked[:self.KEPT] if n]


class _NoSites(Sites):
    """A probe's sites outside a diagnosis (a test that makes a probe itself): nothing kept."""

    def __init__(self) -> None:
        super().__init__(lambda frame: None)

    def tick(self, units: int = 1) -> int:
        return 0


NO_SITES: Sites = _NoSites()


class Probe:
    """Counts one signature. ``install`` may raise (a TF internal that moved): the diagnosis says
    so. ``patch`` is set to the registry name by the diagnosis that makes it."""

    patch = ""
    watches_eager_ops = False  # counts through EagerExecutions: nothing without its wrapper
    sites: Sites = NO_SITES  # the diagnosis gives each probe its own before install

    def install(self, installer: Installer, executor: EagerExecutions) -> None:
        raise NotImplementedError

    def count(self) -> int:
        raise NotImplementedError

    def unit_bytes_here(self) -> Optional[float]:
        """Bytes one counted unit holds, measured in this process (``core.retained``), where the
        probe can tell; None: the report uses the lab's size or a fit."""
        return None


def attribute_after(args: tuple, name: str) -> Any:
    """The value following the attribute name ``name`` in a fast-path call's arguments (names are
    str; never ``in``/``index``, whose == on a tensor would run an op)."""
    for index in range(2, len(args) - 1):
        value = args[index]
        if type(value) is str and value == name:
            return args[index + 1]
    return _MISSING
