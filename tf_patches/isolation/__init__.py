"""A fresh process per call: :mod:`.local` (``run_isolated``, ``map_isolated``, ``fresh_graph``)
and :mod:`.ray` (the same on a Ray cluster, public as ``tf_patches.ray``)."""

from .._moved import forward

__getattr__ = forward(__name__, "tf_patches.isolation.local",
                      ("run_isolated", "map_isolated", "fresh_graph", "IsolatedError", "IsolatedCrash",
                       "IsolatedTimeout", "RemoteTraceback", "IsolationWarning"))
