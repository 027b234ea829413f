"""The user's line behind a stack: what a signature's ``sites`` and a trap's warning name.

The user's frame is the first one, from the probe outwards, outside TensorFlow, Keras and
tf-patches (:class:`tf_patches.core.frames.CodeClassifier`: code objects classified once). A
function a ``tf.function`` traces runs as AutoGraph's converted copy, from a generated file
(``/tmp/__autograph_generated_file….py``): its line is mapped back to the user's own through
AutoGraph's source map (the converted functions' factories, in its transpiler's cache; private,
so a TF that moved it gets the generated line, never an error). Lookups are cached per line.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Dict, Optional, Tuple

from .frames import LIBRARY_PACKAGES, CodeClassifier, package_dirs
from .signature import Site
AUTOGRAPH_FILE = "__autograph_generated_file"


def locator() -> Callable[[Any], Optional[Site]]:
    """A function from a stack frame to the user's site behind it (None: no user frame)."""
    user_frame = CodeClassifier(package_dirs(LIBRARY_PACKAGES + ("tf_patches",))).user_frame
    mapped: Dict[Tuple[str, int], Site] = {}

    def locate(frame: Any) -> Optional[Site]:
        frame = user_frame(frame)
        if frame is None:
            return None
        code = frame.f_code
        site = (code.co_filename, frame.f_lineno, code.co_name)
        if AUTOGRAPH_FILE not in code.co_filename:
            return site
        found = mapped.get(site[:2])
        if found is None:
            found = original_site(site)
            if found is None:
                return site  # not in a source map yet: not cached, found next time
            mapped[site[:2]] = found
        return found

    return locate


def original_site(site: Site) -> Optional[Site]:
    """The user's line that AutoGraph converted into this generated one, or None."""
    api = sys.modules.get("tensorflow.python.autograph.impl.api")
    origin_info = sys.modules.get("tensorflow.python.autograph.pyct.origin_info")
    if api is None or origin_info is None:
        return None
    filename, line, _ = site
    key = origin_info.LineLocation(filename, line)
    try:
        for factories in list(api._TRANSPILER._cache._cache.values()):
            for factory in list(factories.values()):
                source_map = getattr(factory, "source_map", None) or {}
                origin = source_map.get(key)
                if origin is not None:
                    return origin.loc.filename, origin.loc.lineno, origin.function_name
    except Exception:
        pass
    return None
