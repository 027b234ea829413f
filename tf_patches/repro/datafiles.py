"""The files a run wrote, compared as a user would: byte for byte, and for ``.npy``, ``.npz``,
HDF5 (``.h5``, ``.hdf5``, ``.weights.h5``), Keras (``.keras``: its weights and config, not the
save date in its metadata) and TF checkpoints (a prefix with ``.index``, or a folder with a
``checkpoint`` file), array by array: the first differing array, its index and both values.
Files equal array by array but not byte by byte (HDF5 records times) are the same.

Without h5py an HDF5 or Keras file is compared byte for byte, and the comparison says so.
"""

from __future__ import annotations

import glob
import importlib.util
import io
import os
import shutil
import zipfile
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple

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


def keep(path: str, into: str) -> Optional[str]:
    """Copy what ``path`` names (a file, a checkpoint's files, a folder) into the folder ``into``
    (the run's own: the next run overwrites the original); the copy's path, or None if missing."""
    os.makedirs(into, exist_ok=True)
    target = os.path.join(into, os.path.basename(os.path.normpath(path)) or "file")
    if os.path.isdir(path):
        shutil.copytree(path, target)
        return target
    if os.path.isfile(path):
        shutil.copy2(path, target)
        return target
    parts = glob.glob(glob.escape(path) + ".*")  # a checkpoint prefix: .index, .data-00000-of-00001
    for part in parts:
        shutil.copy2(part, os.path.join(into, os.path.basename(part)))
    return target if parts else None


def stamp(path: str) -> Optional[Tuple[int, int]]:
    """What tells whether a run wrote ``path`` (modification time and size), None if absent."""
    for candidate in (path, path + ".index", os.path.join(path, "checkpoint")):
        try:
            info = os.stat(candidate)
            return info.st_mtime_ns, info.st_size
        except OSError:
            continue
    return None


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


def array_difference(a: Any, b: Any) -> Optional[Tuple[Optional[Tuple[int, ...]], str, str, str]]:
    """Where two arrays first differ bit for bit: (index, value in a, value in b, what differs),
    or None. NaN equals NaN and 0.0 differs from -0.0 here, as bits do."""
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return None, f"{a.dtype}{list(a.shape)}", f"{b.dtype}{list(b.shape)}", \
            f"is {a.dtype}{list(a.shape)} in run 1 but {b.dtype}{list(b.shape)} in the other"
    if a.dtype == object:
        return (None, repr(a), repr(b), "differs") if repr(a) != repr(b) else None
    found = first_bit_difference(a, b)
    if found is None:
        return None
    index, count = found
    return index, value(a, index), value(b, index), \
        f"({a.dtype}{list(a.shape)}) differs at index {index}; {count:,} of {a.size:,} elements differ"


def first_bit_difference(a: Any, b: Any) -> Optional[Tuple[Tuple[int, ...], int]]:
    """(the first index at which two arrays of one dtype and shape differ bit for bit, how many
    elements differ), or None. Bytes, not values: NaN == NaN is False and 0.0 == -0.0 is True, but
    neither pair is bit-identical."""
    import numpy as np

    mask = (a.reshape(a.shape + (1,)).view(np.uint8) != b.reshape(b.shape + (1,)).view(np.uint8)).any(axis=-1)
    count = int(mask.sum())
    if not count:
        return None
    return tuple(int(i) for i in np.argwhere(mask)[0]), count


def value(array: Any, index: Tuple[int, ...]) -> str:
    """One element as text; a float with its bits too (two floats can print alike and differ)."""
    import numpy as np

    element = array[index]
    text = repr(element.item())
    if array.dtype.kind == "f":
        text += f" (bits 0x{np.array(element, dtype=array.dtype.newbyteorder('>')).tobytes().hex()})"
    return text


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
    elif how == "keras":  # a zip: the weights (HDF5) and the config; metadata.json holds the save date
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            for name in names:
                if name.endswith(".h5"):
                    yield from ((f"{name}:{key}", array) for key, array in hdf5_arrays(io.BytesIO(archive.read(name))))
                elif name != "metadata.json":
                    yield name, np.frombuffer(archive.read(name), dtype=np.uint8)
    elif how == "checkpoint":
        yield from _checkpoint_arrays(path)
    else:
        with open(path, "rb") as handle:
            yield "bytes", np.frombuffer(handle.read(), dtype=np.uint8)


def hdf5_arrays(source: Any) -> Named:
    """The datasets of an HDF5 file (a path or a file object), by their path in it."""
    import h5py  # Keras depends on it: present wherever Keras saved the file

    found: List[Tuple[str, Any]] = []
    with h5py.File(source, "r") as handle:
        handle.visititems(lambda key, obj: found.append((key, obj[()])) if isinstance(obj, h5py.Dataset) else None)
    yield from found


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
    """A folder's (or a checkpoint prefix's) files by relative name: small files (checkpoints)."""
    files: Dict[str, bytes] = {}
    if os.path.isdir(path):
        for root, _, names in os.walk(path):
            for name in names:
                full = os.path.join(root, name)
                with open(full, "rb") as handle:
                    files[os.path.relpath(full, path)] = handle.read()
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
    with open(first, "rb") as handle:
        a_bytes = handle.read()
    with open(other, "rb") as handle:
        b_bytes = handle.read()
    offset = next((i for i, (x, y) in enumerate(zip(a_bytes, b_bytes)) if x != y), min(len(a_bytes), len(b_bytes)))
    if offset == len(a_bytes) == len(b_bytes):
        return None
    return FileDifference(path, run, None, (offset,), repr(a_bytes[offset:offset + 16]), repr(b_bytes[offset:offset + 16]),
                          f"{path} differs byte for byte from byte {offset:,} ({len(a_bytes):,} and {len(b_bytes):,} bytes)")


def _size(data: Optional[bytes]) -> str:
    return "missing" if data is None else f"{len(data):,} bytes"
