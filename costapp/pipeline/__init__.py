"""What follows new data: the steps (steps.py), their bookkeeping in the
database (services.py), the run executor (runs.py) and the tasks."""
