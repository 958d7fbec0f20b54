"""Suites of runs and what is read from them: the suite file (``suites``), running it
(``running``), collecting its results (``results``, ``reward_quantities``, ``diagnostics``,
``stats``), reporting and plotting them (``report``, ``plots``), the screen and its
confirmation (``screen``, ``confirmation``), and the precondition probe (``probe``).

Only ``running`` and ``probe`` run models; every other module here reads files and imports
no torch (tests/test_layers.py)."""
