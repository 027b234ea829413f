"""``tf-patches repro -- COMMAND``: run a command several times and say whether its runs repeat,
and if not, why (the reproducibility traps its processes sprang, the fingerprint fields and seeds
that differ), and with ``--verify`` whether the named fixes make them repeat.

- :mod:`.evidence`: what each process of a run records at exit, and reading it back
- :mod:`.masking`: standard output compared line by line, what always varies masked
- :mod:`.datafiles`: files compared by array (``.npy``, ``.npz``, HDF5, Keras, TF checkpoints)
- :mod:`.runner`: one run, a fresh process tree, supervised as ``diagnose`` supervises its command
- :mod:`.report`: the verdict, the causes, the text and the JSON
- :mod:`.command`: the command line, and :func:`repro`, its function form

Importing this package imports nothing else (the bootstrap imports :mod:`.evidence` at start-up).
"""
