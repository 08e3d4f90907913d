"""Unit costs: the stored figures of every series ($ per 1k requests, per 1M
tokens, per GPU-hour; baselines, bands, flags and their explanations), by
hour, day, week and month.

The arithmetic is analytics' (``analytics.unit_cost_figures``, one call);
this package reads its inputs and writes what comes back. Its modules point
one way: ``services`` (the recompute: read, call analytics, write) imports
``states`` (saved baseline states: the resume point, the checkpoints) and
``inputs`` (the ORM reads); neither of those imports the other or
``services``.
"""
