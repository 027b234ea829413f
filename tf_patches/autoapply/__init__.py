"""Auto-apply for a process tree: ``tf-patches run`` (:mod:`.run`), the start-up bootstrap that
the interpreter imports as ``sitecustomize`` (:mod:`.bootstrap`, standard library only) and the
``--malloc`` allocator switch (:mod:`.allocator`). Importing this package imports none of them:
the bootstrap comes through here at every interpreter start."""

from .._moved import forward

__getattr__ = forward(__name__, "tf_patches.autoapply.run",
                      ("HELP", "add_arguments", "run", "command_of", "patch_variables",
                       "command_environment", "start_or_status"))
