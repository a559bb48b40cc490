"""The ``attnlab`` commands, one module each: ``add_arguments(parser)`` adds its options,
``run_from_args(args) -> int`` does its work by calling the library, ``HELP`` is its line
in ``attnlab --help`` and the module's docstring its description. :mod:`attnlab.cli` only
builds the parser from them and dispatches.

The layer between ``report``/``serve``/``bench`` and ``cli``: a command may use any part
of the library, and its module imports none of it (nor torch) until it runs, so that
``attnlab COMMAND --help`` prints at once. :mod:`.model_run` is what the commands that run
a model on a text share. ``train``'s command is :mod:`attnlab.train.command`, since
``python -m attnlab.train`` (layer 5) reads the same options.
"""
