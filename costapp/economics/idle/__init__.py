"""Idle in dollars, both kinds, per deployment or pool and UTC day
(``IdleFigure``): GPU-hours paid that no replica used (``paid``) and serving
below capacity at the target utilisation (``headroom``).

The arithmetic is in ``analytics.idle``; this package reads, shapes, writes
and presents. Its arrows point one way:

- ``present``: the figures as strings for the idle page, the overview's card
  and the deployment page's card; reads through ``selectors``.
- ``selectors``: the reads of the stored figures the pages share.
- ``services``: ``idle_figures_recompute``, the write (after the unit-cost
  recompute); reads its inputs through ``inputs`` and ``capacity``.
- ``inputs``: the recompute's reads (hours, the allocated bill).
- ``capacity``: what one replica carries within the SLA, per the capacity
  engine, once per deployment and day.
- ``flags``: what a stored figure's ``flags`` mean (written by ``services``,
  counted by ``selectors``).
"""
