"""The patches, one module each. A patch module declares:

``NAME``, ``TITLE``, ``ISSUE_URL`` and ``GATE`` (a :class:`tf_patches.core.gate.Gate`); optionally
``OPTIONS`` (a tuple of :class:`tf_patches.core.options.Option`, read by ``apply_all``), and the verbs:

- ``precondition(env, options) -> str | None``: a reason to skip beyond the gate (an option is off);
- ``prepare(ctx)``: work needed *before* TensorFlow is imported (environment variables);
- ``install(ctx) -> str | None``: the patch itself, once TensorFlow is imported; returns a sentence
  for the report.

Every change goes through ``ctx`` (a :class:`tf_patches.core.context.PatchContext`), which journals it,
so revert needs no code of its own. An advisory declares ``advise(env) -> str`` instead of ``install``.

Then, in closing sections, what the tools find through the registry (no tool imports a patch):

- ``# --- diagnose: the live signature ---``: ``SIGNATURE`` (a :class:`tf_patches.core.signature.Signature`)
  and ``PROBE`` (a :class:`tf_patches.core.signature.Probe` class that counts it), for ``diagnose``;
- ``# --- canary: is the bug still upstream? ---``: ``canary() -> Finding`` (:mod:`tf_patches.core.canary`)
  for ``scripts/canary.py``, and ``LIFECYCLE_OPTIONS`` (the ``apply_all`` keywords under which it
  installs on a CPU machine, where the defaults do not) and ``LIFECYCLE_NEEDS`` (the TF symbols a
  patch that replaces nothing calls), for the canary and ``tests/test_lifecycle.py``.

Add a module here and its name to ``tf_patches.core.registry.PATCH_MODULES`` (ARCHITECTURE.md).
"""
