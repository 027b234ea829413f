"""Which stack frames (and modules) are TensorFlow's (or Keras's) and which are the user's.

Patches that key on "the user's line behind this call" (rfft_guard's warnings, seed_kernel_cache's
stable seeds for the ops without a stateless twin) walk the stack on their paths, so code objects are classified once and looked up by ``id()``: hashing a code
object hashes its constants on every call (microseconds for a long function). Every classified
code object is kept alive, so no id is reused for another one.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any, Dict, List, Optional, Tuple

# TensorFlow's own packages and those of its add-ons from the tensorflow organisation: their frames
# belong to "the op being called", not to the user's call site, and replace_everywhere rebinds
# only in their modules (never in the user's).
LIBRARY_PACKAGES = (
    "tensorflow", "tensorflow_core", "keras", "tf_keras",
    "tensorflow_estimator", "tensorflow_probability", "tensorflow_addons", "tensorflow_text",
    "tensorflow_io",
)
# The generated public API modules (tf.*, tf.compat.v1.*, keras.*): where a function exported with
# tf_export is bound under its public name, besides the module that defines it.
API_MODULES = ("tensorflow", "tensorflow_core")
API_PREFIXES = ("tensorflow._api.", "tensorflow.compat.", "tensorflow_core._api.", "tensorflow_core.compat.",
                "keras.api.", "keras._tf_keras.", "tf_keras.api.")


def package_dirs(names: Tuple[str, ...] = LIBRARY_PACKAGES) -> Tuple[str, ...]:
    """The installed directories of these top-level packages (found without importing them),
    each ending with a separator so that ``startswith`` matches whole path components."""
    dirs = []
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            dirs.append(os.path.join(location, ""))
    return tuple(dirs)


class CodeClassifier:
    """Tells library code from user code by file location; ``known`` is read directly on hot paths."""

    def __init__(self, library_dirs: Tuple[str, ...]):
        self._library_dirs = library_dirs
        self.known: Dict[int, bool] = {}  # id(code) -> is library code
        self._pinned: List[Any] = []

    def classify(self, code: Any) -> bool:
        self._pinned.append(code)
        library = self.known[id(code)] = code.co_filename.startswith(self._library_dirs)
        return library

    def user_frame(self, frame: Any) -> Optional[Any]:
        """The first frame, from ``frame`` outwards, that is not library code (None if none)."""
        known = self.known
        while frame is not None:
            code = frame.f_code
            library = known.get(id(code))
            if library is None:
                library = self.classify(code)
            if not library:
                return frame
            frame = frame.f_back
        return None

    def clear(self) -> None:
        self.known.clear()
        self._pinned.clear()
