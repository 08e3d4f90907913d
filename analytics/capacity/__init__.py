"""Capacity what-if engine (pure: numpy, pandas, scipy)."""
