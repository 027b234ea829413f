"""One run of :func:`tf_patches.testing.check_reproducible`, in its own fresh interpreter:
``python -m tf_patches.testing.reproduce SPEC_JSON OUT.npz``.

Applies the patches before anything else can import TensorFlow (the determinism switches are
read once, at TF's first op), runs the target, and writes every array it produced, by name and
in order, to ``OUT.npz`` for the parent to compare, and the run's fingerprint (what decides its
numbers besides code and seeds, read once the target ran) beside it (:func:`fingerprint_path`).
"""

from __future__ import annotations

import importlib
import io
import json
import os
import sys
import types
import zipfile
from typing import Any, Dict, Iterator, List, Tuple

from ..core.engine import apply_all, report
from ..core.fingerprint import fingerprint
from ..core.settings import Settings

Named = Iterator[Tuple[str, Any]]


def main(argv: List[str]) -> int:
    spec, out = json.loads(argv[1]), argv[2]
    settings = Settings.from_environ()  # the parent's Settings, as this run's variables (spec["environ"])
    apply_all(**settings.to_kwargs())
    if spec["kind"] == "function":
        target: Any = importlib.import_module(spec["module"])
        for part in spec["qualname"].split("."):
            target = getattr(target, part)
        arrays = list(_flatten(target(), "result"))
    else:
        namespace = _run_script(spec["path"], spec["args"])
        if spec["outputs"]:
            arrays = [item for path in spec["outputs"] for item in _read_output(path)]
        else:
            arrays = [item for name, value in namespace.items() if not name.startswith("_") and _is_data(value)
                      for item in _flatten(value, name)]
    if not arrays:
        raise SystemExit(f"{spec['label']} produced nothing to compare: return arrays, tensors or a model, "
                         "or name the files a script writes in outputs")
    row = report()["op_determinism"]
    if settings.deterministic and row.status == "failed":  # the runs would prove nothing
        raise RuntimeError(f"tf-patches could not make this run deterministic: {row.reason}")
    _save(out, arrays)
    with open(fingerprint_path(out), "w", encoding="utf-8") as handle:
        json.dump(fingerprint(), handle)
    return 0


def fingerprint_path(out: str) -> str:
    """Where the run writing ``out`` leaves its fingerprint (JSON)."""
    return os.path.splitext(out)[0] + ".fingerprint.json"


def _run_script(path: str, args: List[str]) -> Dict[str, Any]:
    """Run a script as ``python path args...`` would (its folder first on ``sys.path``, its own
    ``__main__`` module, for pickling and multiprocessing) and return its globals, also when it
    ends with ``sys.exit(0)``: ``runpy.run_path`` loses them then."""
    with open(path, "rb") as handle:
        code = compile(handle.read(), path, "exec")
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(path))
    module = types.ModuleType("__main__")
    module.__file__ = path
    sys.modules["__main__"] = module
    try:
        exec(code, module.__dict__)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
    return module.__dict__


def _is_data(value: Any) -> bool:
    """Module-level results worth comparing: arrays, tensors, variables, models — not modules,
    functions, classes or numbers used as settings."""
    if _weights(value) is not None:
        return True
    if isinstance(value, types.ModuleType) or callable(value):
        return False
    return hasattr(value, "__array__") or hasattr(value, "numpy")


def _weights(value: Any) -> Any:
    """A Keras model's or layer's weight variables, or None (duck-typed: Keras 2 and 3)."""
    if isinstance(value, type) or not hasattr(value, "get_weights"):
        return None
    return getattr(value, "weights", None)


def _flatten(value: Any, name: str) -> Named:
    """Every array in ``value``, named by the path to it (``result[0]``, ``model.weights[2]``)."""
    import numpy as np

    weights = _weights(value)
    if weights is not None:
        for i, variable in enumerate(weights):
            yield f"{name}.weights[{i}] ({variable.name})", np.asarray(variable.numpy())
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _flatten(item, f"{name}[{key!r}]")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _flatten(item, f"{name}[{i}]")
    elif value is not None:
        array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
        if array.dtype == object:
            raise TypeError(f"{name} is a {type(value).__name__}, which cannot be compared bit for bit; "
                            "return arrays, tensors, numbers, Keras models or lists/dicts of those")
        yield name, array


def _read_output(path: str) -> Named:
    import numpy as np

    if path.endswith(".npy"):
        yield path, np.load(path, allow_pickle=False)
    elif path.endswith(".npz"):
        with np.load(path, allow_pickle=False) as data:
            for key in data.files:
                yield f"{path}:{key}", data[key]
    elif path.endswith((".h5", ".hdf5")):
        yield from _h5_arrays(path, path)
    elif path.endswith(".keras"):  # a zip whose weights are an HDF5 file; its metadata holds the save date
        with zipfile.ZipFile(path) as archive:
            yield from _h5_arrays(io.BytesIO(archive.read("model.weights.h5")), path)
    else:
        with open(path, "rb") as handle:
            yield path, np.frombuffer(handle.read(), dtype=np.uint8)


def _h5_arrays(source: Any, label: str) -> Named:
    from ..session.arrays import hdf5_arrays  # repro reads them the same way

    yield from ((f"{label}:{key}", array) for key, array in hdf5_arrays(source))


def _save(out: str, arrays: List[Tuple[str, Any]]) -> None:
    """Write an ``.npz`` by hand: ``np.savez(**names)`` would reject a name such as ``file``."""
    import numpy as np

    with zipfile.ZipFile(out, "w") as archive:
        for name, array in arrays:
            with archive.open(name + ".npy", "w") as handle:
                np.lib.format.write_array(handle, np.ascontiguousarray(array), allow_pickle=False)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
