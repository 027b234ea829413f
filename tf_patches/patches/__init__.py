"""The patches, one module each. Each declares itself in one call, ``PATCH = Patch(...)``: the
protocol is written once, in :mod:`tf_patches.core.patch` (ARCHITECTURE.md, "How to add a patch").

Add a module here and its name to ``tf_patches.core.registry.PATCH_MODULES``.
"""
