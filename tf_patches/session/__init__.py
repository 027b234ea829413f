"""The command session: what the tools that run a user's command share, below them all
(ARCHITECTURE.md). :mod:`.bootstrap` (the start-up folder put first on ``PYTHONPATH``, standard
library only), :mod:`.evidence` (which variable arms which recorder at start-up: the one table),
:mod:`.command` (the command's environment, started and supervised to its end: a typed
:class:`~.command.Run`), :mod:`.processes` (the one process supervisor), :mod:`.allocator`
(``--malloc``), :mod:`.arguments` (the patch options on a command line: the CLI edge) and
:mod:`.verification` (``--verify``: the fixes named, merged over the user's settings). Importing
this package imports none of them: the bootstrap comes through here at every interpreter start."""
