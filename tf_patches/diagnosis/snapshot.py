"""What one diagnosed process writes (``$TF_PATCHES_DIAGNOSE_DIR/<pid>.json``) and the report
reads: :class:`Snapshot`, whose fields are the JSON's keys, at :data:`VERSION`. A reader of another
version skips the file (the processes of one tree run one tf-patches as a rule).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional

VERSION = 1  # raised when a key changes meaning or goes; new keys may come without a raise


@dataclass
class Snapshot:
    """One process's diagnosis so far. The evidence the report's advice rests on: ``sites``
    (``{patch: [[file, line, function, units], ...]}``: :class:`~tf_patches.core.signature.Sites`),
    ``collection`` (:mod:`.collection`), ``heap`` and ``heap_samples`` (``[time, in use, held]``:
    :mod:`.heap`), the counts of :mod:`.models`, and ``retained`` (``{patch: bytes}``, one unit's
    size measured here: :meth:`~tf_patches.core.signature.Probe.unit_bytes_here`)."""

    pid: int
    tf_version: Optional[str]
    signatures: List[str]  # the armed probes' patches, in the order of each sample's counts
    samples: List[list]  # [time, rss bytes (None: unreadable), [count per signature]]
    argv: List[str] = field(default_factory=list)
    distribution: Optional[str] = None
    python: str = ""
    started: Optional[float] = None
    armed: Optional[float] = None  # when TensorFlow was imported (None: never)
    interval: Optional[float] = None
    onsets: Dict[str, float] = field(default_factory=dict)  # patch -> time its count passed its floor
    skipped: Dict[str, str] = field(default_factory=dict)  # patch -> why its probe was not armed
    failed: Dict[str, str] = field(default_factory=dict)  # patch -> why its probe could not count
    conditions: List[Dict[str, str]] = field(default_factory=list)  # advisories: patch, title, advice, issue
    patched: List[str] = field(default_factory=list)
    sites: Dict[str, List[list]] = field(default_factory=dict)
    collection: Optional[Dict[str, Any]] = None
    heap: Optional[Dict[str, Any]] = None
    heap_samples: List[list] = field(default_factory=list)
    retained: Dict[str, float] = field(default_factory=dict)
    models_built: Optional[int] = None
    clear_session_calls: Optional[int] = None
    graph_resets: Optional[int] = None
    evidence_failed: Optional[Dict[str, str]] = None  # what the evidence could not watch, and why

    def counts(self) -> Dict[str, int]:
        """Each signature's count at the last sample."""
        return dict(zip(self.signatures, self.samples[-1][2])) if self.samples else {}

    def to_dict(self) -> Dict[str, Any]:
        # Its fields are plain JSON values (no nested dataclass): no deep copy of what snapshot()
        # copied already, at every write of a diagnosed process's sampler (≈7 ms with full buffers).
        return {"version": VERSION, **vars(self)}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Snapshot":
        """The snapshot in ``data``; ValueError for another version or a missing key."""
        if data.get("version") != VERSION:
            raise ValueError(f"snapshot version {data.get('version')!r}, this tf-patches reads {VERSION}")
        known = {item.name for item in fields(cls)}
        try:
            return cls(**{key: value for key, value in data.items() if key in known})
        except TypeError as exc:
            raise ValueError(f"not a snapshot: {exc}") from None


def read_all(directory: str) -> List[Snapshot]:
    """The snapshots the processes wrote to ``directory`` (each replaces its file whole: no torn
    reads); a file that is not one is skipped."""
    snapshots = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as file:
                snapshots.append(Snapshot.from_dict(json.load(file)))
        except (OSError, ValueError, AttributeError):
            continue
    return snapshots
