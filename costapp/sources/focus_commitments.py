"""Which commitment a FOCUS row belongs to (``costapp.sources.focus``).

FOCUS names a commitment discount with CommitmentDiscountType (the provider's
words: AWS "Savings Plan" and "Reserved Instance", Azure "Reservation"),
CommitmentDiscountCategory ("Spend": a savings plan or a spend-based commitment;
"Usage": a reservation of a quantity) and CommitmentDiscountStatus ("Used" on
usage it covered, "Unused" on the part of the period's commitment nothing
used). An unused row is stored as a fee of its commitment, as Cost Explorer's
amortized view puts the unused commitment on the RIFee and
SavingsPlanRecurringFee lines, so both sources read the same.
"""

from __future__ import annotations

from collections.abc import Callable

from analytics.errors import InvalidInput

CATEGORIES = {"Spend": "savings_plan", "Usage": "reserved"}
STATUSES = ("Used", "Unused")
COLUMNS = (
    "CommitmentDiscountCategory",
    "CommitmentDiscountStatus",
    "CommitmentDiscountType",
)


def _by_type(text: str) -> str:
    words = text.lower().replace(" ", "")
    if "savingsplan" in words:
        return "savings_plan"
    if "reserv" in words:
        return "reserved"
    return ""


def commitment_of(cell: Callable[[str], str], record_type: str) -> tuple[str, str]:
    """(commitment, record type) of a row whose cells ``cell(column)`` returns
    ("" when null); a category or status FOCUS does not define is refused."""
    category = cell("CommitmentDiscountCategory")
    status = cell("CommitmentDiscountStatus")
    if category and category not in CATEGORIES:
        raise InvalidInput(
            "CommitmentDiscountCategory", category, "is not Spend or Usage"
        )
    if status and status not in STATUSES:
        raise InvalidInput("CommitmentDiscountStatus", status, "is not Used or Unused")
    commitment = _by_type(cell("CommitmentDiscountType")) or CATEGORIES.get(
        category, ""
    )
    if commitment and status == "Unused" and record_type == "usage":
        return commitment, "fee"
    return commitment, record_type
