"""The engine: what every patch and tool builds on, and imports nothing of theirs.

``environment`` detects the machine, ``versions``, ``gate`` and ``registry`` decide what applies,
``options`` reads arguments and ``TF_PATCHES_*`` variables, ``context`` journals every change a
patch makes (so revert needs no code of its own) and dresses each replacement with the
original's identity, ``importhook`` runs work at ``import tensorflow``, ``engine`` ties them into
``apply_all`` / ``revert_all`` / ``report``, ``reporting`` holds the report, ``errors`` the
warnings and errors, ``frames`` tells library code from user code, ``seeds`` gives each process
its seed, ``streams`` writes to streams that may be closed; ``memory``, ``signature``,
``retained`` and ``canary`` are what a patch module declares its leak's live signature (and
measures what its units hold) and upstream check with.
"""
