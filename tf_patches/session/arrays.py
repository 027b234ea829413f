"""Arrays compared bit for bit: what ``tf-patches repro``'s files (:mod:`tf_patches.repro.datafiles`)
and ``testing.check_reproducible``'s results share. NumPy (and h5py) imported on first use."""

from __future__ import annotations

from typing import Any, Iterator, List, Optional, Tuple

Named = Iterator[Tuple[str, Any]]  # (name, array)


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


def hdf5_arrays(source: Any) -> Named:
    """The datasets of an HDF5 file (a path or a file object), by their path in it."""
    import h5py  # Keras depends on it: present wherever Keras saved the file

    found: List[Tuple[str, Any]] = []
    with h5py.File(source, "r") as handle:
        handle.visititems(lambda key, obj: found.append((key, obj[()])) if isinstance(obj, h5py.Dataset) else None)
    yield from found
