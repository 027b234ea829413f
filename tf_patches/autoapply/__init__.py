"""Auto-apply for a process tree: ``tf-patches run`` (:mod:`.run`), the start-up bootstrap that
the interpreter imports as ``sitecustomize`` (:mod:`.bootstrap`, standard library only) and the
``--malloc`` allocator switch (:mod:`.allocator`). Importing this package imports none of them:
the bootstrap comes through here at every interpreter start."""
