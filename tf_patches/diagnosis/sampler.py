"""``tf_patches.diagnose()``: which known leak does this program have?

::

    with tf_patches.diagnose() as d:
        train()
    print(d.report())

A :class:`Diagnosis` arms the probe of every registered patch that declares a signature (its
``Patch``'s ``probe``, found through the registry) when TensorFlow is imported (at once if it is), samples the process's RSS and the counts every ``interval`` seconds in a
daemon thread, and removes the probes when stopped. ``tf-patches diagnose -- COMMAND`` arms one
in every Python process of the command's tree through the bootstrap
(:func:`arm_from_environment`); each writes its snapshot to a file the command reads at the end.
Nothing is armed, and no thread started, in a process that never imports TensorFlow.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from ..session.bootstrap import DIAGNOSE_VARIABLE
from ..core import files, importhook
from ..core.memory import resident_bytes as rss_bytes  # by this name since 0.2 (diagnosis.command reads it)
from .collection import CollectionWatch
from .heap import heap, in_use_and_held
from .models import KerasModels
from .snapshot import Snapshot

if TYPE_CHECKING:
    from .report import DiagnosisReport

DIRECTORY_VARIABLE = DIAGNOSE_VARIABLE  # where each process writes <pid>.json (the session's table)
INTERVAL_VARIABLE = "TF_PATCHES_DIAGNOSE_INTERVAL"
DEFAULT_INTERVAL = 1.0
MAX_SAMPLES = 1_000  # past this, every other sample is dropped: a week-long job stays small


def thin(samples: List[Any]) -> None:
    """Past :data:`MAX_SAMPLES`, drop every other sample in place, keeping the first and the last."""
    if len(samples) > MAX_SAMPLES:
        samples[:] = samples[:-1:2] + samples[-1:]


def _interval(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"interval must be a number of seconds, got {type(value).__name__}")
    if not 0.01 <= value <= 3600:
        raise ValueError(f"interval must be between 0.01 and 3600 seconds, got {value!r}")
    return float(value)


class Diagnosis:
    """The probes, the samples and the snapshot of one process. Use :func:`diagnose`."""

    def __init__(self, interval: float = DEFAULT_INTERVAL, write_to: Optional[str] = None):
        self.interval = _interval(interval)
        self._write_to = write_to
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._installer: Any = None
        self._probes: List[Any] = []
        self._floors: Dict[str, int] = {}  # counts up to this are set-up (the signature's floor)
        self._base: List[int] = []
        self._collection = CollectionWatch()
        self._models = KerasModels()
        # What was seen so far; snapshot() adds the pid, the probes' and the evidence's figures.
        self._seen = Snapshot(pid=0, tf_version=None, signatures=[], samples=[], argv=list(sys.argv),
                              python=sys.version.split()[0], started=round(time.time(), 3), interval=self.interval)
        self._armed_at: Optional[float] = None
        self._stopped = False
        self._hooked = False

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> "Diagnosis":
        module = sys.modules.get("tensorflow")
        if module is not None:
            self._arm(module)
        else:
            self._hooked = True
            importhook.after_import("tensorflow", self._arm)
        return self

    def stop(self) -> None:
        """Take a last sample, stop sampling, remove the probes (the counts stay readable)."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        if self._hooked:
            importhook.cancel("tensorflow", self._arm)
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        self.sample()
        if self._armed_at is not None:  # a process without TF writes nothing: nothing to measure
            self._collection.collect_once()  # after the last sample: the growth is the program's own
        self._models.remove()
        if self._installer is not None:
            self._installer.remove()
        self._write()

    def __enter__(self) -> "Diagnosis":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    # -- arming, at `import tensorflow` -----------------------------------------------------
    def _arm(self, module: Any) -> None:
        # An import hook: whatever goes wrong here must not break `import tensorflow`.
        try:
            self._arm_probes(module)
        except Exception as exc:
            self._seen.failed["diagnosis"] = f"{type(exc).__name__}: {exc}"
        with self._lock:
            if self._stopped or self._armed_at is not None:
                return
            self._armed_at = time.time()
            self._base = [self._count(probe) for probe in self._probes]
            self._collection.start()
        self._start_sampling()

    def _arm_probes(self, module: Any) -> None:
        from ..core import engine
        from ..core import registry
        from ..core.environment import complete
        from ..core.signature import DIAGNOSING, EagerExecutions, Installer, Sites
        from ..core.sites import locator

        env = engine.assumed_or_detected()
        if not env.complete:  # one assumed (TF_PATCHES_ASSUME) says it all, as apply_all() takes it
            env = complete(env, module)
        self._seen.tf_version, self._seen.distribution = env.version, env.distribution
        defaults = {option.name: option.default for option in registry.all_options()}
        defaults[DIAGNOSING] = True  # a signature without a patch arms only here (patches/retracing.py)
        installer = Installer()
        executions = EagerExecutions()
        locate = locator()  # the user's line behind a probe's stack
        for spec in registry.specs():
            verdict, reason = spec.check(env, defaults)
            if verdict is False:
                self._seen.skipped[spec.name] = reason or "not relevant here"
                continue
            advice = spec.advise(env) if spec.advise is not None else ""
            if advice:  # an advisory with nothing to say before its signature fires adds no condition
                self._seen.conditions.append({"patch": spec.name, "title": spec.title,
                                         "advice": advice, "issue": spec.issue})
            if spec.probe is None or spec.signature is None:
                continue
            try:
                probe = spec.probe()
                probe.patch = spec.name
                probe.sites = Sites(locate)
                probe.install(installer, executions)
            except Exception as exc:  # a TF internal that moved: said in the report
                self._seen.failed[spec.name] = f"{type(exc).__name__}: {exc}"
                continue
            self._probes.append(probe)
            self._floors[spec.name] = spec.signature.floor
        try:
            executions.install(installer)
        except Exception as exc:
            for probe in self._probes:
                if probe.watches_eager_ops:
                    self._seen.failed[probe.patch] = f"eager ops cannot be watched: {type(exc).__name__}: {exc}"
            self._probes = [probe for probe in self._probes if probe.patch not in self._seen.failed]
        self._installer = installer
        self._models.install(installer)

    # -- sampling ---------------------------------------------------------------------------
    def _start_sampling(self) -> None:
        """The first sample now, then one every ``interval`` in a daemon thread."""
        self.sample()
        self._thread = threading.Thread(target=self._run, name="tf-patches-diagnose", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()
            self._write()

    @staticmethod
    def _count(probe: Any) -> int:
        try:
            return int(probe.count())
        except Exception:
            return 0

    def sample(self) -> None:
        """Record now: time, RSS, and each armed signature's count."""
        with self._lock:
            if self._armed_at is None:
                return
            now = time.time()
            counts = [self._count(probe) - base for probe, base in zip(self._probes, self._base)]
            self._seen.samples.append([round(now, 3), rss_bytes(), counts])
            self._seen.heap_samples.append([round(now, 3), *in_use_and_held()])
            for probe, count in zip(self._probes, counts):
                if count > self._floors[probe.patch] and probe.patch not in self._seen.onsets:
                    self._seen.onsets[probe.patch] = round(now, 3)
            thin(self._seen.samples)
            thin(self._seen.heap_samples)

    def snapshot(self) -> Snapshot:
        """This process's diagnosis so far (what a child writes for the command, as JSON)."""
        with self._lock:
            seen = self._seen
            # argv read now, as before the typed snapshot: under `python -m mod` it is ['-m', ...]
            # at interpreter start, when a diagnosed process makes its Diagnosis.
            return replace(seen, pid=os.getpid(), argv=list(sys.argv),
                           armed=self._armed_at and round(self._armed_at, 3),
                           signatures=[probe.patch for probe in self._probes],
                           samples=[list(sample) for sample in seen.samples], onsets=dict(seen.onsets),
                           heap_samples=[list(sample) for sample in seen.heap_samples], skipped=dict(seen.skipped),
                           failed=dict(seen.failed), conditions=list(seen.conditions), patched=self._applied(),
                           evidence_failed=dict(self._models.failed) or None,
                           **self._models.to_dict(), **self._evidence())

    def _evidence(self) -> Dict[str, Any]:
        """What is read through code that may fail: a key absent then, a probe's size absent."""
        evidence: Dict[str, Any] = {"retained": {}}
        for key, read in (("sites", self._sites), ("collection", self._collection.to_dict), ("heap", heap)):
            try:
                evidence[key] = read()
            except Exception:
                pass
        for probe in self._probes:  # bytes per unit, measured here where the probe can tell
            try:
                size = probe.unit_bytes_here()
            except Exception:
                continue
            if size is not None:
                evidence["retained"][probe.patch] = round(float(size), 1)
        return evidence

    def _sites(self) -> Dict[str, List[list]]:
        sites = {probe.patch: probe.sites.top() for probe in self._probes}
        return {patch: rows for patch, rows in sites.items() if rows}

    def _applied(self) -> List[str]:
        """The patches applied now: read at each snapshot, since under the bootstrap this
        diagnosis arms before the engine's own import hook installs them."""
        if self._armed_at is None:
            return []
        try:
            from ..core import engine

            return [row.name for row in engine.current_report().rows if row.status == "applied"]
        except Exception:
            return []

    def report(self) -> "DiagnosisReport":
        """What was seen so far."""
        from .report import DiagnosisReport

        if not self._stopped:
            self.sample()
        return DiagnosisReport.from_snapshots([self.snapshot()])

    def _write(self) -> None:
        if not self._write_to or self._armed_at is None:  # a process without TF leaves no file
            return
        try:  # whole or not at all: diagnose reads it back (a temporary per write: threads write too)
            files.write_atomically(self._write_to, json.dumps(self.snapshot().to_dict()), durable=False)
        except Exception:
            pass  # the command's folder went away: the program must run on

    def _forked(self) -> None:
        """In a forked child: its own file, counts from now, a sampler of its own."""
        if self._write_to:
            self._write_to = os.path.join(os.path.dirname(self._write_to), f"{os.getpid()}.json")
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._seen.samples, self._seen.onsets, self._seen.heap_samples = [], {}, []
        for probe in self._probes:  # the evidence from now too: the parent's is the parent's
            probe.sites.reset()
        self._collection.reset()
        self._models.reset()
        if self._armed_at is not None and not self._stopped:
            self._armed_at = time.time()
            self._base = [self._count(probe) for probe in self._probes]
            self._start_sampling()


def diagnose(interval: float = 0.5) -> Diagnosis:
    """Diagnose the code in a ``with`` block (or from :meth:`Diagnosis.start` to ``stop``):
    ``with tf_patches.diagnose() as d: ...``, then ``print(d.report())``."""
    return Diagnosis(interval)


_armed: Optional[Diagnosis] = None


def arm_from_environment() -> None:
    """Under ``tf-patches diagnose``: arm a diagnosis that writes ``$TF_PATCHES_DIAGNOSE_DIR/<pid>.json``
    (called by the bootstrap at interpreter start; costs an import hook until TF is imported)."""
    global _armed
    directory = os.environ.get(DIRECTORY_VARIABLE)
    if not directory or not directory.strip() or _armed is not None:  # blank: unset, as every variable
        return
    try:
        interval = _interval(float(os.environ.get(INTERVAL_VARIABLE) or DEFAULT_INTERVAL))
    except (TypeError, ValueError):
        interval = DEFAULT_INTERVAL
    _armed = Diagnosis(interval, write_to=os.path.join(directory, f"{os.getpid()}.json"))
    _armed.start()
    atexit.register(_armed.stop)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_armed._forked)
