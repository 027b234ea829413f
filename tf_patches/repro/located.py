"""``tf-patches repro --locate``, in repro itself: each run's op digests (written by
:mod:`.locate` in its processes as ``locate-<pid>.json``) read back and compared with run 1's, in
a deterministic order: (the eager execution an op ran in, its creation number in the process,
how many times it ran before), never wall-clock order between threads. :func:`locate` names the
first op whose outputs differ (its type, name, graph, the user's line that built it, which call of
it, and its values where recorded); :func:`summary` what was recorded and what it cost. No
TensorFlow here: repro compares without importing it."""

from __future__ import annotations

import glob
import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .locate import DEFAULT_LIMIT, HEAD, SCHEMA, VARIABLE

__all__ = ["DEFAULT_LIMIT", "VARIABLE", "read", "locate", "summary", "render", "recorded_line"]
MEASURED_DATASETS = (2, 12)  # tf.data functions' ops measured seen from here (2.12 and 2.21)


def read(folder: str) -> Optional[Dict[str, Any]]:
    """A run's recording: its first process that recorded ops (the oldest pid), or None."""
    found = []
    for path in glob.glob(os.path.join(folder, "evidence", "locate-*.json")):
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("schema") == SCHEMA:
            found.append(data)
    found.sort(key=lambda data: (not (data.get("traces") or data.get("eager")), data.get("pid", 0)))
    return found[0] if found else None


def summary(recordings: Sequence[Optional[Dict[str, Any]]]) -> Dict[str, Any]:
    """What run 1 recorded and cost (the others alike), and what the recorder cannot see."""
    first = next((data for data in recordings if data), None)
    if first is None:
        return {"recorded": False, "why": "no process of run 1 imported TensorFlow (or none reached its exit)"}
    return {"recorded": True, "ops": len(first.get("tensors") or []) + len({row[0] for row in first.get("eager") or []}),
            "op_executions": len(first.get("traces") or []) + len(first.get("eager") or []),
            "bytes": first.get("bytes", 0), "seconds": first.get("seconds", 0.0), "limit": first.get("limit"),
            "stopped": first.get("stopped") if first.get("stopped") != "exit" else "",
            "xla_graphs": first.get("xla") or [], "tensorflow": first.get("tensorflow", ""),
            "not_seen": _not_seen(first), "runs_recorded": sum(1 for data in recordings if data)}


def _not_seen(data: Dict[str, Any]) -> List[str]:
    """What the recorder could not see in this run, said rather than guessed."""
    said = []
    graphs = data.get("xla") or []
    if graphs:
        said.append(f"{len(graphs)} XLA-compiled graph{'s' if len(graphs) != 1 else ''} ({', '.join(graphs[:3])}): "
                    "their ops run as compiled, not instrumented")
    try:
        version = tuple(int(part) for part in str(data.get("tensorflow", "")).split(".")[:2])
    except ValueError:
        version = ()
    if version and version < MEASURED_DATASETS:
        said.append(f"maybe ops inside tf.data functions: TF {data.get('tensorflow')} is older than "
                    f"{'.'.join(map(str, MEASURED_DATASETS))}, where they were measured seen")
    return said


def _items(data: Dict[str, Any]) -> Tuple[List[tuple], Dict[tuple, list]]:
    """(order keys in order; key -> record): graph traces keyed ("g", tensor, occurrence), eager
    outputs ("e", execution, slot)."""
    order, records = [], {}
    seen: Dict[int, int] = {}
    for execution, number, digest, head in data.get("traces") or []:
        occurrence = seen.get(number, 0)
        seen[number] = occurrence + 1
        key = ("g", number, occurrence)
        order.append(((execution, number, occurrence), key))
        records[key] = [digest, head, execution]
    for row in data.get("eager") or []:
        execution, slot = row[0], row[3]
        key = ("e", execution, slot)
        order.append(((execution, -1, slot), key))
        records[key] = [row[6], row[7], execution]
    order.sort()
    return [key for _, key in order], records


def _reordered(first: Dict[str, Any], other: Dict[str, Any]) -> set:
    """Graph tensors whose digests are the same in both runs but in another order (a parallel map's
    elements): an order difference, not a value's."""
    def digests(data):
        found: Dict[int, List[str]] = {}
        for _, number, digest, _ in data.get("traces") or []:
            found.setdefault(number, []).append(digest)
        return found
    mine, theirs = digests(first), digests(other)
    return {number for number, values in mine.items()
            if values != theirs.get(number) and sorted(values) == sorted(theirs.get(number) or [])}


def locate(recordings: Sequence[Optional[Dict[str, Any]]], cwd: str = "",
           against: str = "") -> Optional[Dict[str, Any]]:
    """The first op whose outputs differ between run 1 and a later run, or None. ``against``: the
    second recording is another machine's (``--against FILE``, its name), not run 2."""
    first = recordings[0] if recordings else None
    if not first:
        return None
    order, mine = _items(first)
    for run, other in enumerate(recordings[1:], start=2):
        if not other:
            continue
        _, theirs = _items(other)
        reordered = _reordered(first, other)
        side = (None, against) if against else (run, f"run {run}")
        through = _through(first, other)
        for key in order:
            if through is not None and mine[key][2] > through:
                break  # past where a recording cut short by its byte budget ends
            if key[0] == "g" and key[1] in reordered:
                continue
            here, there = mine[key], theirs.get(key)
            if there is None:
                if _same_op(first, other, key):
                    return _found(first, key, here, None, side, cwd, f"{side[1]} ran it fewer times")
                return _found(first, key, here, None, side, cwd, f"{side[1]} built other ops from here")
            if here[0] != there[0]:
                if not _same_op(first, other, key):
                    return _found(first, key, here, there, side, cwd, f"{side[1]} built other ops from here")
                return _found(first, key, here, there, side, cwd, "")
    return None


def _through(*recordings: Dict[str, Any]) -> Optional[int]:
    """The last eager execution both recordings hold whole (None: they hold all)."""
    cut = [data["through"] for data in recordings if isinstance(data.get("through"), int)]
    return min(cut) if cut else None


def _describe(data: Dict[str, Any], key: tuple) -> Dict[str, Any]:
    if key[0] == "g":
        op_type, op_name, graph, site, slot, dtype, shape = data["tensors"][key[1]]
        return {"op_type": op_type, "op_name": op_name, "graph": graph, "where": site, "output": slot,
                "dtype": dtype, "shape": shape, "eager": False}
    row = next(row for row in data["eager"] if row[0] == key[1] and row[3] == key[2])
    return {"op_type": row[1], "op_name": "", "graph": "", "where": row[2], "output": row[3], "dtype": row[4],
            "shape": row[5], "eager": True}


def _same_op(first: Dict[str, Any], other: Dict[str, Any], key: tuple) -> bool:
    try:
        mine, theirs = _describe(first, key), _describe(other, key)
    except (IndexError, StopIteration, KeyError, TypeError, ValueError):
        return False
    return all(mine[name] == theirs[name] for name in ("op_type", "op_name", "graph", "output"))


def _found(first, key, here, there, side, cwd, problem) -> Dict[str, Any]:
    described = _describe(first, key)
    if key[0] == "g":
        call = key[2] + 1  # the op's n-th execution: its function's n-th call, or a loop's n-th turn
    else:  # the n-th eager op of that type at that line
        call = sum(1 for row in first["eager"] if row[0] <= key[1] and row[1] == described["op_type"]
                   and row[2] == described["where"] and row[3] == key[2])
    where = described["where"]
    if cwd and where:
        from .causes import relative

        where = relative(where, cwd)
    run, name = side
    result = dict(described, where=where, call=call, execution=here[2], run=run,
                  against=None if run else name, digests=[here[0], there[0] if there else None], problem=problem)
    result["values"] = _values(here[1], there[1] if there else None, described.get("shape"))
    return result


def _values(mine: Any, theirs: Any, shape: Any) -> Dict[str, Any]:
    """Where the recorded elements (the first or last few) say it: the flat index of a differing
    element, both values with their bits, and how many differ where all were recorded."""
    if not mine or not theirs or mine[0] != theirs[0] or len(mine[1]) != len(theirs[1]):
        return {"recorded": False}
    at, left, right = mine[0], mine[1], theirs[1]
    size = None
    if isinstance(shape, list) and all(isinstance(dim, int) for dim in shape):
        size = 1
        for dim in shape:
            size *= dim
    # All of it: as many as its shape says, or fewer of the first than were asked for.
    whole = (size is not None and size == len(left)) or (at == "first" and len(left) < HEAD)
    differing = [index for index, (a, b) in enumerate(zip(left, right)) if a != b]
    result: Dict[str, Any] = {"recorded": True, "elements": f"{'all' if whole else at} {len(left)}",
                              "index": None, "index_is_first": False, "values": None,
                              "differing": len(differing) if whole else None}
    if differing:
        index = differing[0]
        if at == "last":
            index = (size - len(left) + index) if size is not None else None
        result.update(index=index, index_is_first=whole or at == "first",
                      values=[_value(left[differing[0]]), _value(right[differing[0]])])
    return result


def _value(pair: Sequence[Any]) -> str:
    value, bits = pair
    return f"{value} (bits {bits})" if bits else str(value)


def render(located: Optional[Dict[str, Any]], recording: Optional[Dict[str, Any]]) -> List[str]:
    """The report's ``located:`` lines."""
    if recording is None:
        return []
    if not recording.get("recorded"):
        return [f"located: nothing recorded ({recording.get('why')})"]
    cost = (f"{recording['ops']} ops, {recording['op_executions']} op executions recorded in run 1 "
            f"({_size(recording['bytes'])} of digests, {recording['seconds']:.2f} s in the recorder)")
    lines = []
    against = (recording.get("against") or {}).get("file")
    if located is None and _cut_short(recording):  # what was not recorded cannot be said to be equal
        lines.append(f"located: no op's outputs differ{f' from the recorded run in {against}' if against else ''} "
                     f"in what was recorded, but the recorder stopped early ({cost})")
    elif located is None:
        lines.append(f"located: no op's outputs differ{f' from the recorded run in {against}' if against else ''} "
                     f"({cost})")
    else:
        where = f" at {located['where']}" if located.get("where") else ""
        name = f" {located['op_name']}" if located.get("op_name") else ""
        graph = f" in {located['graph']}" if located.get("graph") else " (eager)"
        versus = f"run {located['run']}" if located.get("run") else f"the recorded run in {located.get('against')}"
        lines.append(f"located: the first op whose outputs differ (run 1 vs {versus}): "
                     f"{located['op_type']}{name}{graph}{where}, call {located['call']} of it")
        shape = "?" if located.get("shape") is None else "x".join(str(d) for d in located["shape"]) or "scalar"
        values = located.get("values") or {}
        detail = f"  output {located['output']}: {located['dtype']} [{shape}]"
        if located.get("problem"):
            detail += f"; {located['problem']}"
        elif values.get("values"):
            index = values.get("index")
            which = "first differing" if values.get("index_is_first") else "a differing"
            detail += (f"; {which} element" + (f" [{index}]" if index is not None else "")
                       + f": {values['values'][0]} vs {values['values'][1]}")
            if values.get("differing") is not None:
                detail += f"; {values['differing']} of {values['elements'].split()[-1]} elements differ"
        elif values.get("recorded"):
            detail += f"; the {values['elements']} elements recorded are equal: it differs elsewhere"
        else:
            detail += "; its values were not recorded (digests only)"
        lines.append(detail)
        if located.get("fingerprint_differences") is not None:
            fields = located["fingerprint_differences"]
            lines.append(f"  the machines' fingerprints differ in: {', '.join(fields)}" if fields else
                         "  the machines' fingerprints are the same: what differs is not among their fields")
        lines.append(f"  {cost}")
    if recording.get("stopped"):
        lines.append(f"  recording stopped: {recording['stopped']}")
    lines += [f"  not seen: {what}" for what in recording.get("not_seen") or []]
    return lines


def _cut_short(recording: Dict[str, Any]) -> bool:
    """Whether run 1's recorder stopped before the program's end for a reason other than its
    limit or byte budget (which the report states as such): a failure inside the recorder."""
    stopped = recording.get("stopped") or ""
    return bool(stopped) and not stopped.startswith(("the limit", "the byte budget"))


def recorded_line(recorded: Dict[str, Any]) -> str:
    """The report's line for ``--record FILE``."""
    if not recorded.get("written"):
        return f"recorded: nothing in {recorded.get('file')}: {recorded.get('why')}"
    return (f"recorded: run 1's op digests and fingerprint in {recorded.get('file')} ({_size(recorded.get('bytes', 0))}); "
            f"on another machine: tf-patches repro --locate --against {recorded.get('file')} -- COMMAND")


def _size(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 1e5 else f"{size / 1e3:.1f} kB"
