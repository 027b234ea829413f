"""The files a run wrote, compared as a user would: byte for byte, and for ``.npy``, ``.npz``,
HDF5 (``.h5``, ``.hdf5``, ``.weights.h5``) and TF checkpoints (a prefix with ``.index``, or a
folder with a ``checkpoint`` file), array by array: the first differing array, its index and both
values. Files equal array by array but not byte by byte (HDF5 records times) are the same.

A Keras 3 ``.keras`` file (a zip: ``config.json``, ``model.weights.h5``, ``metadata.json``) is
compared by its config, without the ids Keras writes per process (``shared_object_id`` is the
``id()`` of a shared object: it differs in every process, so two saves of one model never matched
byte for byte), then by its weights, each named by the layer's variable (``dense/kernel``) and
its place in the weights file, then by its metadata less the save date.

Without h5py an HDF5 file is compared byte for byte (a ``.keras`` file's weights too), and the
comparison says so.

Which runs wrote a path is told by :func:`stamp`: for a folder, a stamp of every entry in it (not
the folder's own modification time, which a file rewritten in place leaves alone), with each
file's change time (``cp -p`` keeps the modification time, never the change time). :func:`keep`
copies what a run wrote with symbolic links kept as links and FIFOs, sockets and devices skipped
with a note: a dangling ``latest`` link or a FIFO in a checkpoint folder never ends the report.
"""

from __future__ import annotations

import glob
import importlib.util
import io
import json
import os
import re
import shutil
import stat
import zipfile
from dataclasses import dataclass
from typing import Any, Callable, Dict, Hashable, Iterator, List, Optional, Tuple

from ..session.arrays import array_difference, first_bit_difference, hdf5_arrays, value
from .masking import common_prefix

Named = Iterator[Tuple[str, Any]]


@dataclass(frozen=True)
class FileDifference:
    """How run ``run``'s copy of ``path`` differs from run 1's."""

    path: str
    run: int
    array: Optional[str]  # the array's name inside the file; None: the file itself (bytes, missing)
    index: Optional[Tuple[int, ...]]
    first: str  # run 1's value (or what it was: "missing", "b'..'")
    other: str
    message: str

    def to_dict(self) -> Dict[str, Any]:
        return {"stream": self.path, "run": self.run, "array": self.array,
                "index": list(self.index) if self.index is not None else None,
                "values": [self.first, self.other], "message": self.message}


def kind(path: str) -> str:
    """How ``path`` is compared: npy, npz, hdf5, keras, checkpoint or bytes."""
    if path.endswith(".npy"):
        return "npy"
    if path.endswith(".npz"):
        return "npz"
    if path.endswith((".h5", ".hdf5")):
        return "hdf5"
    if path.endswith(".keras"):
        return "keras"
    if os.path.exists(path + ".index") or (
            os.path.isdir(path) and glob.glob(os.path.join(glob.escape(path), "**", "*.index"), recursive=True)):
        return "checkpoint"
    return "bytes"


def keep(path: str, into: str, notes: Optional[List[str]] = None) -> Optional[str]:
    """Copy what ``path`` names (a file, a checkpoint's files, a folder) into the folder ``into``
    (the run's own: the next run overwrites the original); the copy's path, or None if missing.
    In a folder, symbolic links are copied as links and special files skipped; ``notes`` gets
    each thing that was not copied. Never raises for what it finds."""
    os.makedirs(into, exist_ok=True)
    target = os.path.join(into, os.path.basename(os.path.normpath(path)) or "file")
    try:
        if os.path.isdir(path):
            _copy_tree(path, target, notes if notes is not None else [])
            return target
        if os.path.isfile(path):
            shutil.copy2(path, target)
            return target
        if os.path.lexists(path):  # a FIFO, a socket, a device, a dangling link: nothing to compare
            _note(notes, f"{path}: {_what(path)}, not compared")
            return None
    except OSError as exc:
        _note(notes, f"{path}: could not be kept for comparison ({exc.strerror or exc})")
        return None
    parts = glob.glob(glob.escape(path) + ".*")  # a checkpoint prefix: .index, .data-00000-of-00001
    kept = False
    for part in parts:
        try:
            shutil.copy2(part, os.path.join(into, os.path.basename(part)))
            kept = True
        except OSError as exc:
            _note(notes, f"{part}: could not be kept for comparison ({exc.strerror or exc})")
    return target if kept else None


HASHED_FILE = 1 << 20  # files up to this size are hashed into a stamp too (a coarse clock, cp -p)
HASHED_TOTAL = 64 << 20  # bytes hashed per stamp at most: a large checkpoint tree relies on its times


def stamp(path: str) -> Optional[Hashable]:
    """What tells whether a run wrote ``path``, None if absent: for a file, its size, modification
    and change times, inode and (small files) a hash of its content; for a folder, the same for
    every entry in it, by name (a file rewritten in place changes its entry, not the folder's
    own time); for a checkpoint prefix, its files'."""
    budget = [HASHED_TOTAL]
    try:
        info = os.stat(path)
    except OSError:
        info = None
    if info is not None and stat.S_ISDIR(info.st_mode):
        return ("folder", tuple(_entry_stamp(name, entry, full, budget) for name, entry, full in _entries(path)))
    if info is not None:
        return ("file",) + _file_stamp(path, info, budget)
    if os.path.exists(path + ".index"):
        parts = sorted(part for part in glob.glob(glob.escape(path) + ".*") if os.path.isfile(part))
        return ("prefix", tuple((os.path.basename(part),) + _file_stamp(part, os.stat(part), budget) for part in parts))
    return None


def _file_stamp(path: str, info: os.stat_result, budget: List[int]) -> Tuple[Any, ...]:
    # st_ctime_ns: utime() (cp -p, rsync -t) sets the modification time back, never the change time;
    # the hash: a file rewritten within one tick of a coarse clock, same size, same times.
    times = (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)
    if not stat.S_ISREG(info.st_mode) or info.st_size > min(HASHED_FILE, budget[0]):
        return times
    budget[0] -= info.st_size
    return times + (_digest(path),)


def _digest(path: str) -> str:
    import hashlib

    try:
        with open(path, "rb") as handle:
            return hashlib.blake2b(handle.read(HASHED_FILE + 1), digest_size=16).hexdigest()
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"


def _entry_stamp(name: str, info: os.stat_result, full: str, budget: List[int]) -> Tuple[Any, ...]:
    if stat.S_ISREG(info.st_mode):
        return (name, "file") + _file_stamp(full, info, budget)
    if stat.S_ISLNK(info.st_mode):
        return (name, "link", _readlink(full), info.st_ctime_ns)
    if stat.S_ISDIR(info.st_mode):
        return (name, "folder")
    return (name, "special", stat.S_IFMT(info.st_mode), info.st_ctime_ns)


def _entries(root: str) -> Iterator[Tuple[str, os.stat_result, str]]:
    """Every entry under the folder ``root``, parents before children, by relative name, as
    lstat sees it (a link is a link, never followed); what vanishes or cannot be read is left out."""
    for folder, folders, names in os.walk(root, followlinks=False):
        folders.sort()
        for name in sorted(folders + names):
            full = os.path.join(folder, name)
            try:
                info = os.lstat(full)
            except OSError:
                continue
            yield os.path.relpath(full, root), info, full


def _copy_tree(source: str, target: str, notes: List[str]) -> None:
    """``shutil.copytree`` as repro needs it: links kept as links (one to a removed checkpoint
    included), FIFOs, sockets and devices skipped, each problem a note instead of an exception."""
    os.makedirs(target, exist_ok=True)
    skipped: List[str] = []
    for name, info, full in _entries(source):
        into = os.path.join(target, name)
        try:
            if stat.S_ISLNK(info.st_mode):
                os.symlink(os.readlink(full), into)
            elif stat.S_ISDIR(info.st_mode):
                os.makedirs(into, exist_ok=True)
            elif stat.S_ISREG(info.st_mode):
                shutil.copy2(full, into)
            else:
                skipped.append(f"{name} ({_kind_of_mode(info.st_mode)})")
        except OSError as exc:
            skipped.append(f"{name} ({exc.strerror or exc})")
    if skipped:
        shown = ", ".join(skipped[:5]) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
        notes.append(f"{source}: not compared (not regular files or unreadable): {shown}")


def _what(path: str) -> str:
    try:
        info = os.lstat(path)
    except OSError:
        return "unreadable"
    if stat.S_ISLNK(info.st_mode):
        try:  # a link to /dev/zero leads somewhere: say where it leads
            return f"a link to {_readlink(path)} ({_kind_of_mode(os.stat(path).st_mode)})"
        except OSError:
            return f"a link to {_readlink(path)} that leads nowhere"
    return _kind_of_mode(info.st_mode)


def _kind_of_mode(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _note(notes: Optional[List[str]], note: str) -> None:
    if notes is not None and note not in notes:
        notes.append(note)


def compare(path: str, first: Optional[str], other: Optional[str], run: int,
            notes: Optional[List[str]] = None) -> Optional[FileDifference]:
    """The first difference between run 1's copy and run ``run``'s, or None. ``notes`` gets what
    the comparison could not do as asked (no h5py: bytes)."""
    if first is None or other is None:
        if first is None and other is None:
            return None
        missing = "run 1" if first is None else f"run {run}"
        return FileDifference(path, run, None, None, "missing" if first is None else "written",
                              "missing" if other is None else "written", f"{path} was not written by {missing}")
    if _same_bytes(first, other):
        return None
    how = kind(first)  # the copy keeps the names: a checkpoint's prefix, a folder's files
    if how == "keras" and os.path.isfile(first) and os.path.isfile(other):
        try:
            return keras_difference(path, first, other, run, notes)
        except Exception as exc:  # not a Keras 3 zip, a truncated member: bytes, never a traceback
            _note(notes, f"{path}: not readable as a .keras file ({type(exc).__name__}: {exc}), "
                         "compared byte for byte")
            return _bytes_difference(path, first, other, run)
    if how in ("hdf5", "keras") and importlib.util.find_spec("h5py") is None:
        if notes is not None:
            notes.append(f"{path}: h5py is not installed, compared byte for byte (HDF5 records times: "
                         "pip install h5py to compare by array)")
        how = "bytes"
    if how == "bytes":
        return _bytes_difference(path, first, other, run)
    try:
        first_arrays, other_arrays = dict(arrays(first, how)), dict(arrays(other, how))
    except Exception as exc:  # not the format its name says, a truncated file
        if notes is not None:
            notes.append(f"{path}: not readable as {how} ({type(exc).__name__}: {exc}), compared byte for byte")
        return _bytes_difference(path, first, other, run)
    for name in [*first_arrays, *(n for n in other_arrays if n not in first_arrays)]:
        if name not in first_arrays or name not in other_arrays:
            where = "run 1" if name not in first_arrays else f"run {run}"
            return FileDifference(path, run, name, None, "missing" if name not in first_arrays else "present",
                                  "missing" if name not in other_arrays else "present",
                                  f"{path}: {name!r} is missing from {where}")
        found = array_difference(first_arrays[name], other_arrays[name])
        if found is not None:
            index, a, b, detail = found
            return FileDifference(path, run, name, index, a, b, f"{path}: {name!r} {detail}")
    return None


def arrays(path: str, how: str) -> Named:
    """The named arrays in a file of kind ``how``."""
    import numpy as np

    if how == "npy":
        yield "array", np.load(path, allow_pickle=False)
    elif how == "npz":
        with np.load(path, allow_pickle=False) as data:
            for key in data.files:
                yield key, data[key]
    elif how == "hdf5":
        yield from hdf5_arrays(path)
    elif how == "keras":  # a zip: the weights by variable, the config and metadata without per-process values
        with zipfile.ZipFile(path) as archive:
            for name in _members(archive):
                if name.endswith(".h5"):
                    yield from ((label, array) for label, _, array in keras_weights(archive, name))
                else:
                    yield name, np.frombuffer(_member_for_comparison(archive, name), dtype=np.uint8)
    elif how == "checkpoint":
        yield from _checkpoint_arrays(path)
    else:
        with open(path, "rb") as handle:
            yield "bytes", np.frombuffer(handle.read(), dtype=np.uint8)


def _checkpoint_arrays(path: str) -> Named:
    import tensorflow as tf  # only here: a checkpoint needs TF's reader

    prefixes = [path] if os.path.exists(path + ".index") else \
        sorted(name[:-len(".index")] for name in glob.glob(os.path.join(glob.escape(path), "**", "*.index"), recursive=True))
    for prefix in prefixes:
        reader = tf.train.load_checkpoint(prefix)
        label = os.path.relpath(prefix, path) + ":" if prefix != path else ""
        for name in sorted(reader.get_variable_to_shape_map()):
            yield label + name, reader.get_tensor(name)


def _same_bytes(first: str, other: str) -> bool:
    if os.path.isdir(first) or os.path.isdir(other) or not os.path.isfile(first):
        return _tree_bytes(first) == _tree_bytes(other)
    if os.path.getsize(first) != os.path.getsize(other):
        return False
    with open(first, "rb") as a, open(other, "rb") as b:
        while True:
            chunk = a.read(1 << 20)
            if chunk != b.read(1 << 20):
                return False
            if not chunk:
                return True


def _tree_bytes(path: str) -> Dict[str, bytes]:
    """A folder's (or a checkpoint prefix's) files by relative name: small files (checkpoints).
    A link is its target (never followed); FIFOs, sockets and devices are left out."""
    files: Dict[str, bytes] = {}
    if os.path.isdir(path):
        for name, info, full in _entries(path):
            if stat.S_ISLNK(info.st_mode):
                files[name] = b"\0link to " + os.fsencode(_readlink(full))
            elif stat.S_ISREG(info.st_mode):
                try:
                    with open(full, "rb") as handle:
                        files[name] = handle.read()
                except OSError as exc:
                    files[name] = b"\0unreadable: " + str(exc).encode()
    else:
        for part in glob.glob(glob.escape(path) + ".*"):
            with open(part, "rb") as handle:
                files[os.path.basename(part)[len(os.path.basename(path)):]] = handle.read()
    return files


def _bytes_difference(path: str, first: str, other: str, run: int) -> Optional[FileDifference]:
    if os.path.isdir(first) or not os.path.isfile(first):
        a, b = _tree_bytes(first), _tree_bytes(other)
        for name in sorted(set(a) | set(b)):
            if a.get(name) != b.get(name):
                return FileDifference(path, run, name, None, _size(a.get(name)), _size(b.get(name)),
                                      f"{path}: {name} differs byte for byte")
        return None
    sizes = os.path.getsize(first), os.path.getsize(other)
    offset, a_bytes, b_bytes = _first_differing_byte(first, other)
    if offset is None:
        return None
    return FileDifference(path, run, None, (offset,), repr(a_bytes), repr(b_bytes),
                          f"{path} differs byte for byte from byte {offset:,} ({sizes[0]:,} and {sizes[1]:,} bytes)")


_CHUNK = 1 << 20


def _first_differing_byte(first: str, other: str) -> Tuple[Optional[int], bytes, bytes]:
    """Where two files first differ, read a chunk at a time (a 200 MB file differing in its last
    bytes took 71 s in a byte loop): the offset and up to 16 bytes of each from there; None: equal."""
    offset = 0
    with open(first, "rb") as a, open(other, "rb") as b:
        while True:
            chunk_a, chunk_b = a.read(_CHUNK), b.read(_CHUNK)
            if chunk_a != chunk_b:
                at = common_prefix(chunk_a, chunk_b)
                a.seek(offset + at)
                b.seek(offset + at)
                return offset + at, a.read(16), b.read(16)
            if not chunk_a:
                return None, b"", b""
            offset += len(chunk_a)


def _size(data: Optional[bytes]) -> str:
    return "missing" if data is None else f"{len(data):,} bytes"


# -- Keras 3 .keras files -----------------------------------------------------------------------
_KERAS_CONFIG, _KERAS_METADATA = "config.json", "metadata.json"
_PER_PROCESS_KEYS = ("shared_object_id",)  # id() of an object shared between layers: per process
_PER_SAVE_METADATA = ("date_saved",)

# Each layer's variables in the order Keras saves them (trainable then non-trainable, each in
# creation order: Layer.save_own_variables), by class, from its config. Only used where the count
# matches what the file holds; otherwise a weight is named by its place in the file alone.
_CONV = ("Conv1D", "Conv2D", "Conv3D", "Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose",
         "DepthwiseConv1D", "DepthwiseConv2D", "Dense")
_LAYER_VARIABLES: Dict[str, Callable[[Dict[str, Any]], List[str]]] = {
    **{name: (lambda config: ["kernel"] + (["bias"] if config.get("use_bias", True) else [])) for name in _CONV},
    **{name: (lambda config: ["depthwise_kernel", "pointwise_kernel"] + (["bias"] if config.get("use_bias", True)
                                                                          else []))
       for name in ("SeparableConv1D", "SeparableConv2D")},
    "BatchNormalization": lambda config: ((["gamma"] if config.get("scale", True) else [])
                                          + (["beta"] if config.get("center", True) else [])
                                          + ["moving_mean", "moving_variance"]),
    "LayerNormalization": lambda config: ((["gamma"] if config.get("scale", True) else [])
                                          + (["beta"] if config.get("center", True)
                                             and not config.get("rms_scaling", False) else [])),
    "Embedding": lambda config: ["embeddings"],
}
_CELL_VARIABLES = ("kernel", "recurrent_kernel", "bias")  # LSTMCell, GRUCell, SimpleRNNCell


def keras_difference(path: str, first: str, other: str, run: int,
                     notes: Optional[List[str]] = None) -> Optional[FileDifference]:
    """The first difference between two ``.keras`` files: a member one lacks, then the config
    (less Keras's per-process ids), the weights (each by its variable), other members (assets)
    byte for byte, and the metadata less the save date."""
    with zipfile.ZipFile(first) as a, zipfile.ZipFile(other) as b:
        names_a, names_b = _members(a), _members(b)
        for name in [*names_a, *(n for n in names_b if n not in names_a)]:
            if name not in names_a or name not in names_b:
                where = "run 1" if name not in names_a else f"run {run}"
                return FileDifference(path, run, name, None, "present" if name in names_a else "missing",
                                      "present" if name in names_b else "missing",
                                      f"{path}: {name} is missing from {where}'s file")
            found = _keras_member_difference(path, a, b, name, run, notes)
            if found is not None:
                return found
    return None


def keras_weights(archive: zipfile.ZipFile, member: str) -> List[Tuple[str, str, Any]]:
    """The weights in a ``.keras`` file's HDF5 member: (the variable's name, ``dense/kernel``
    where the config says it, else its HDF5 path; its HDF5 path; the array), in the file's order
    (``vars/2`` before ``vars/10``)."""
    import h5py  # Keras depends on it: present wherever Keras saved the file

    config = _keras_config(archive)
    layers = _layers_by_name(config) if config is not None else {}
    found: List[Tuple[str, str, Any]] = []
    with h5py.File(io.BytesIO(archive.read(member)), "r") as handle:
        groups: List[Tuple[str, Any]] = []
        handle.visititems(lambda key, obj: groups.append((key, obj))
                          if isinstance(obj, h5py.Group) and key.split("/")[-1] == "vars" else None)
        for key, group in sorted(groups, key=lambda item: _natural(item[0])):
            datasets = sorted((name for name in group if isinstance(group[name], h5py.Dataset)), key=_natural)
            labels = _variable_labels(key, group.attrs.get("name"), len(datasets), layers)
            for name, label in zip(datasets, labels):
                found.append((label, f"{key}/{name}", group[name][()]))
    return found


def _keras_member_difference(path: str, a: zipfile.ZipFile, b: zipfile.ZipFile, name: str, run: int,
                             notes: Optional[List[str]]) -> Optional[FileDifference]:
    if name in (_KERAS_CONFIG, _KERAS_METADATA):
        data_a, data_b = json.loads(a.read(name)), json.loads(b.read(name))
        if name == _KERAS_CONFIG:
            data_a, data_b = _without_process_ids(data_a), _without_process_ids(data_b)
        else:
            data_a, data_b = _without_save_date(data_a), _without_save_date(data_b)
        found = json_difference(data_a, data_b)
        if found is None:
            return None
        where, left, right = found
        return FileDifference(path, run, f"{name} {where}", None, left, right,
                              f"{path}: {name} differs at {where} ({left} vs {right})")
    if name.endswith(".h5") and a.read(name) != b.read(name):
        if importlib.util.find_spec("h5py") is None:
            _note(notes, f"{path}: h5py is not installed, its weights were compared byte for byte "
                         "(pip install h5py to compare by variable)")
            return FileDifference(path, run, name, None, f"{a.getinfo(name).file_size:,} bytes",
                                  f"{b.getinfo(name).file_size:,} bytes", f"{path}: {name} differs byte for byte")
        return _keras_weights_difference(path, a, b, name, run)
    if a.read(name) != b.read(name):
        return FileDifference(path, run, name, None, f"{a.getinfo(name).file_size:,} bytes",
                              f"{b.getinfo(name).file_size:,} bytes", f"{path}: {name} differs byte for byte")
    return None


def _keras_weights_difference(path: str, a: zipfile.ZipFile, b: zipfile.ZipFile, member: str,
                              run: int) -> Optional[FileDifference]:
    first = {where: (label, array) for label, where, array in keras_weights(a, member)}
    other = {where: (label, array) for label, where, array in keras_weights(b, member)}
    for where in [*first, *(w for w in other if w not in first)]:
        label = (first.get(where) or other[where])[0]
        shown = label if label == where else f"{label} ({where})"
        if where not in first or where not in other:
            missing = "run 1" if where not in first else f"run {run}"
            return FileDifference(path, run, label, None, "present" if where in first else "missing",
                                  "present" if where in other else "missing",
                                  f"{path}: weight {shown} is missing from {missing}'s file")
        found = array_difference(first[where][1], other[where][1])
        if found is not None:
            index, left, right, detail = found
            return FileDifference(path, run, label, index, left, right, f"{path}: weight {shown} {detail}")
    return None


def _members(archive: zipfile.ZipFile) -> List[str]:
    """The members in the order they are compared: config, weights, the rest, metadata last."""
    names = [name for name in archive.namelist() if not name.endswith("/")]
    rank = {_KERAS_CONFIG: 0, _KERAS_METADATA: 3}
    return sorted(names, key=lambda name: (rank.get(name, 1 if name.endswith(".h5") else 2), name))


def _member_for_comparison(archive: zipfile.ZipFile, name: str) -> bytes:
    """A member's bytes as compared: the config less per-process ids, the metadata less the date."""
    if name == _KERAS_CONFIG:
        return json.dumps(_without_process_ids(json.loads(archive.read(name)))).encode()
    if name == _KERAS_METADATA:
        return json.dumps(_without_save_date(json.loads(archive.read(name)))).encode()
    return archive.read(name)


def _keras_config(archive: zipfile.ZipFile) -> Optional[Any]:
    try:
        return json.loads(archive.read(_KERAS_CONFIG))
    except (KeyError, ValueError):
        return None


def _without_process_ids(config: Any) -> Any:
    """The config with each per-process id replaced by its order of first appearance: which
    objects are shared is kept, the addresses are not."""
    numbers: Dict[Any, int] = {}

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: (numbers.setdefault(item, len(numbers)) if key in _PER_PROCESS_KEYS else walk(item))
                    for key, item in value.items()}
        if isinstance(value, list):
            return [walk(item) for item in value]
        return value

    return walk(config)


def _without_save_date(metadata: Any) -> Any:
    if isinstance(metadata, dict):
        return {key: value for key, value in metadata.items() if key not in _PER_SAVE_METADATA}
    return metadata


def json_difference(a: Any, b: Any, where: str = "") -> Optional[Tuple[str, str, str]]:
    """Where two JSON values first differ: (the path, as ``layers[1].config.units``; a's value;
    b's value, each as short JSON, "(missing)" for a key one lacks), or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            at = f"{where}.{key}" if where else str(key)
            if key not in a or key not in b:
                return at, _short(a[key]) if key in a else "(missing)", _short(b[key]) if key in b else "(missing)"
            found = json_difference(a[key], b[key], at)
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for index, (x, y) in enumerate(zip(a, b)):
            found = json_difference(x, y, f"{where}[{index}]")
            if found is not None:
                return found
        if len(a) != len(b):
            return f"{where} (length)", str(len(a)), str(len(b))
        return None
    if type(a) is not type(b) or a != b:
        return where or "(the whole)", _short(a), _short(b)
    return None


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _layers_by_name(config: Any) -> Dict[str, Tuple[str, Dict[str, Any]]]:
    """Every layer-like object in a Keras config by its name: (class name, its config). A name
    that two classes share is left out (which would be guessing)."""
    found: Dict[str, Tuple[str, Dict[str, Any]]] = {}
    clashing = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            inner = value.get("config")
            if isinstance(value.get("class_name"), str) and isinstance(inner, dict) and isinstance(inner.get("name"), str):
                name = inner["name"]
                if name in found and found[name][0] != value["class_name"]:
                    clashing.add(name)
                found.setdefault(name, (value["class_name"], inner))
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(config)
    return {name: entry for name, entry in found.items() if name not in clashing}


def _variable_labels(group: str, layer: Any, count: int, layers: Dict[str, Tuple[str, Dict[str, Any]]]) -> List[str]:
    """The names of the ``count`` variables in the weights file's group ``group`` (``layers/dense/vars``)
    of the layer named ``layer``: ``dense/kernel``, ... where known, else their HDF5 paths."""
    fallback = [f"{group}/{index}" for index in range(count)]
    if isinstance(layer, bytes):
        layer = layer.decode("utf-8", "replace")
    if not isinstance(layer, str) or not layer:
        return fallback
    names: Optional[List[str]] = None
    if group.endswith("/cell/vars"):  # an RNN's cell: kernel, recurrent_kernel (, bias)
        names = list(_CELL_VARIABLES[:count]) if count in (2, 3) else None
    elif layer in layers and layers[layer][0] in _LAYER_VARIABLES:
        class_name, config = layers[layer]
        names = _LAYER_VARIABLES[class_name](config)
    if names is None or len(names) != count:
        return fallback
    return [f"{layer}/{name}" for name in names]


def _natural(text: str) -> Tuple[Any, ...]:
    """Sort key: "vars/2" before "vars/10"."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))
