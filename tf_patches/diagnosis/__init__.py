"""``tf-patches diagnose`` and :func:`tf_patches.diagnose`: which known leak a program has.

:mod:`.sampler` counts each patch's live signature (discovered through the registry) and samples
memory in the diagnosed process; :mod:`.report` turns the snapshots into figures and advice;
:mod:`.command` runs a command under diagnosis; :mod:`.signatures` is the probe machinery. The
evidence each process adds to its snapshot: :mod:`tf_patches.core.sites` (the user's lines behind each signature),
:mod:`.collection` (what garbage collections free), :mod:`.heap` (the allocator, in use and held),
:mod:`.models` (Keras models built, ``clear_session`` calls).
"""
