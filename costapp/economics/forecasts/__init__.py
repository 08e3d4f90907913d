"""The month-end spend forecast of a series, its budget status and the
overview's month card.

The simulation is ``analytics.forecast``; this package reads a series'
spend, stores the forecasts and presents them. Its arrows point one way:

- ``present``: the month card as strings; reads through ``selectors``.
- ``selectors``: the reads the pages and the API share: a series' forecast
  (stored, or computed when none fits) with its budget applied, the budgets'
  statuses, the month card.
- ``services``: ``month_forecasts_store``, the write at the end of the
  recompute, so pages read ``MonthForecastFigure`` rows instead of running
  ETS per request.
- ``compute``: a series' daily spend read (the figures, split by the bill
  lines' record types) and simulated to month end; the store and the reads'
  fallback both run it.
"""
