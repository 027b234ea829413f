"""``tf-patches repro --record FILE`` and ``--against FILE``, across machines: run 1's op digests
(what :mod:`.locate` wrote in its process) and its fingerprint kept in one JSON file, so that
``repro --locate --against FILE`` on another machine names the first op whose outputs differ from
the recorded run's (:func:`.located.locate`) and the fingerprint fields that differ
(:mod:`.report`). ``--against`` reads a recording or a report (``repro --json``, ``tf-patches
report --json``): a recording is told by its ``schema``. No TensorFlow here."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from .locate import SCHEMA as DIGESTS_SCHEMA

SCHEMA = "tf-patches-repro-recording/1"
_FAMILY = SCHEMA.split("/")[0] + "/"
# A recording's rows, as .locate writes them: (key, row length, whole numbers at, text at, values at).
_ROWS = (("tensors", 7, (4,), (0, 1, 2, 3, 5), None), ("traces", 4, (0, 1), (2,), 3),
         ("eager", 8, (0, 3), (1, 2, 4, 6), 7))


def is_recording(data: Any) -> bool:
    """Whether ``data`` (a JSON document read back) claims to be a recording, of any version."""
    return isinstance(data, Mapping) and str(data.get("schema", "")).startswith(_FAMILY)


def problem(data: Mapping[str, Any]) -> Optional[str]:
    """Why a recording cannot be compared with (None: it can). Checked before any run, so that a
    file cut short or edited by hand is a usage error, not a crash after minutes of runs."""
    if data.get("schema") != SCHEMA:
        return f"a recording of schema {data.get('schema')!r}; this tf-patches reads {SCHEMA}"
    digests = data.get("digests")
    if not isinstance(digests, Mapping) or digests.get("schema") != DIGESTS_SCHEMA:
        return f"holds no op digests of schema {DIGESTS_SCHEMA}"
    for key, length, whole, text, values in _ROWS:
        rows = digests.get(key)
        if not isinstance(rows, list):
            return f"its digests' {key!r} is not a list"
        for row in rows:
            if not (isinstance(row, list) and len(row) == length
                    and all(isinstance(row[index], int) and not isinstance(row[index], bool) for index in whole)
                    and all(isinstance(row[index], str) for index in text)
                    and (values is None or _values_ok(row[values]))):
                return f"its digests' {key!r} holds a malformed row: {str(row)[:80]}"
    tensors = len(digests["tensors"])
    if any(not 0 <= row[1] < tensors for row in digests["traces"]):
        return "its digests' traces name tensors it does not hold"
    if not isinstance(data.get("fingerprint"), Mapping):
        return "holds no fingerprint"
    return None


def _values_ok(head: Any) -> bool:
    """A row's recorded elements: None, or ["first" or "last", [[value, bits], ...]]."""
    return head is None or (isinstance(head, list) and len(head) == 2 and head[0] in ("first", "last")
                            and isinstance(head[1], list)
                            and all(isinstance(pair, list) and len(pair) == 2 for pair in head[1]))


def make(command: Sequence[str], fingerprint: Optional[Mapping[str, Any]], digests: Mapping[str, Any],
         summary: Mapping[str, Any], verdict: str) -> Dict[str, Any]:
    """The recording of run 1: its command, fingerprint (as ``repro --json`` holds it, so that the
    fingerprint comparison reads both alike), its op digests, what they cost, and the verdict of
    the runs it came from (a recording of runs that did not repeat here compares poorly there)."""
    return {"schema": SCHEMA, "command": list(command), "verdict": verdict,
            "fingerprint": {"values": dict(fingerprint or {})}, "locate": dict(summary), "digests": dict(digests)}


def same_command(recorded: Sequence[Any], command: Sequence[str]) -> bool:
    """Whether two commands run the same program, paths aside (another machine, another folder)."""
    def names(parts: Sequence[Any]) -> List[str]:
        return [str(part).replace("\\", "/").rsplit("/", 1)[-1] for part in parts]
    return names(recorded) == names(command)


__all__ = ["SCHEMA", "is_recording", "problem", "make", "same_command"]
