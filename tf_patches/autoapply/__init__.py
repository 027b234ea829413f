"""Auto-apply for a process tree: ``tf-patches run`` (:mod:`.run`), a thin command line over the
command session (:mod:`tf_patches.session`: the bootstrap, the environment, ``--malloc``)."""
