"""The flags a stored idle figure carries (``IdleFigure.flags``): the
recompute writes them, the reads count them."""

from __future__ import annotations

# Load above the capacity the model predicts in some hour of the day.
UNDERESTIMATES = "model_underestimates"
# The paid idle of a day whose bill is still estimated.
ESTIMATED_BILL = "estimated_bill"
