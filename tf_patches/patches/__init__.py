"""The patches, one module each. A patch module declares:

``NAME``, ``TITLE``, ``ISSUE_URL`` and ``GATE`` (a :class:`tf_patches.core.gate.Gate`); optionally
``OPTIONS`` (a tuple of :class:`tf_patches.core.options.Option`, read by ``apply_all``), and the verbs:

- ``precondition(env, options) -> str | None``: a reason to skip beyond the gate (an option is off);
- ``prepare(ctx)``: work needed *before* TensorFlow is imported (environment variables);
- ``install(ctx) -> str | None``: the patch itself, once TensorFlow is imported; returns a sentence
  for the report.

Every change goes through ``ctx`` (a :class:`tf_patches.core.context.PatchContext`), which journals it,
so revert needs no code of its own. Add a module here and its name to
``tf_patches.core.registry.PATCH_MODULES``.
"""
