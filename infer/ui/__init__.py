"""The command line's presentation: imported by ``cli.py``, never by the engine.

``options`` declares the shared flags once (``Options``, ``shared_options``) and ``helpstyle`` how
``--help`` looks (and ``--version``); ``console`` owns the two consoles and the error/exit
plumbing, ``entry`` the run of the app for ``cli.main`` (typer's usage errors as one line, the
streams around it), ``early_sigint`` a Ctrl-C before a command's own code runs; ``prepare`` the
checks before any slow work and the engine load; ``oneshot`` the flow of ``generate`` and
``summarize``; ``render`` the live view of a reply, ``progress`` the prefill bar before it,
``stats_line`` the line after it; ``repl`` the ``chat`` loop; ``records`` the ``--json`` objects;
``bench_view`` the ``bench`` table; ``textio`` reading a text file or standard input. Nothing here
imports ``cli.py``.
"""
