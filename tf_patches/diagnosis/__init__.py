"""``tf-patches diagnose`` and :func:`tf_patches.diagnose`: which known leak a program has.

:mod:`.sampler` counts each patch's live signature (found through :mod:`.signatures`) and samples
memory in the diagnosed process, into a :mod:`.snapshot`; :mod:`.analysis` turns the snapshots
into figures (:mod:`.figures`) and advice (:mod:`.advice`), which :mod:`.report` renders;
:mod:`.command` runs a command under diagnosis, :mod:`.verify` runs it again with the fixes. The
evidence each process adds to its snapshot: :mod:`tf_patches.core.sites` (the user's lines behind
each signature), :mod:`.collection` (what garbage collections free), :mod:`.heap` (the allocator,
in use and held), :mod:`.models` (Keras models built, ``clear_session`` calls).
"""
