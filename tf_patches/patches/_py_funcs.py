"""What from_generator_release and eager_py_function share: taking a py-func callback back from
the graph that TensorFlow tied it to.

``script_ops._internal_py_func`` registers every ``tf.py_function`` / ``tf.numpy_function``
callback weakly in ``script_ops._py_funcs`` and keeps the one strong reference in the outermost
graph's ``_py_funcs_used_in_graph`` list, to die with that graph. In eager mode the outermost graph
is the global default graph, which is never destroyed: each callback, and everything it captures,
lives for good (TF 2.12.1 and 2.21.0 read alike here).
"""

from __future__ import annotations

import threading
from typing import Any

# Serialises our removals: a removal found at index i must not shift under another one. TF only
# appends to these lists, which never moves an index already found.
_lock = threading.Lock()


def release_from_graph(graph: Any, callback: Any) -> bool:
    """Drop ``graph``'s strong reference to ``callback``; False where the graph holds none."""
    callbacks = getattr(graph, "_py_funcs_used_in_graph", None)
    if not callbacks:
        return False
    with _lock:
        # From the end: the callback was appended moments ago, and the list can be long.
        for index in range(len(callbacks) - 1, -1, -1):
            if callbacks[index] is callback:
                del callbacks[index]
                return True
    return False
