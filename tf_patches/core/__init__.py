"""The engine: what every patch and tool builds on, and imports nothing of theirs.

``environment`` detects the machine, ``gate`` and ``registry`` decide what applies, ``options``
reads arguments and ``TF_PATCHES_*`` variables, ``context`` journals every change a patch makes
(so revert needs no code of its own), ``importhook`` runs work at ``import tensorflow``,
``engine`` ties them into ``apply_all`` / ``revert_all`` / ``report``, ``reporting`` holds the
report, ``errors`` the warnings and errors, ``frames`` tells library code from user code.
"""
