"""A fresh process per call: :mod:`.local` (``run_isolated``, ``map_isolated``, ``fresh_graph``)
and :mod:`.ray` (the same on a Ray cluster, public as ``tf_patches.ray``)."""
