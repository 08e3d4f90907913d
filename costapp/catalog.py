"""Names the fleet file and the rate card may use, and the dated price list.

Prices change (AWS cut p4d/p4de/p5 on-demand prices in June 2025), so the
catalogue is dated and every price names its source; the rate card is seeded
from it and users add contract prices beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal

GPU_TYPES: dict[str, tuple[str, ...]] = {
    # GPU type -> MIG profiles it offers (empty: no MIG).
    "A100-40GB": ("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    "A100-80GB": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "H100-SXM": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "H100-PCIe": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "H200": ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    # A30: 4 compute slices, so 1g is a quarter of the GPU, not a seventh.
    "A30": ("1g.6gb", "2g.12gb", "4g.24gb"),
    "L4": (),
    "L40S": (),
    "A10G": (),
}


@dataclass(frozen=True)
class ListPrice:
    instance_type: str
    gpu_type: str
    gpus: int
    region: str
    price_per_hour: Decimal
    effective_from: date
    source: str


_PRICE_LIST_API = "AWS Price List API, AmazonEC2 on-demand Linux, us-east-1"
_JUNE_2025_CUT = (
    "AWS announcement: up to 45% price reduction for P4/P5 instances, June 2025"
)

LIST_PRICES: tuple[ListPrice, ...] = (
    ListPrice(
        "p4d.24xlarge",
        "A100-40GB",
        8,
        "us-east-1",
        Decimal("32.7726"),
        date(2020, 11, 2),
        _PRICE_LIST_API,
    ),
    ListPrice(
        "p4d.24xlarge",
        "A100-40GB",
        8,
        "us-east-1",
        Decimal("21.9659"),
        date(2025, 6, 1),
        _JUNE_2025_CUT,
    ),
    ListPrice(
        "p4de.24xlarge",
        "A100-80GB",
        8,
        "us-east-1",
        Decimal("40.9657"),
        date(2022, 5, 26),
        _PRICE_LIST_API,
    ),
    ListPrice(
        "p4de.24xlarge",
        "A100-80GB",
        8,
        "us-east-1",
        Decimal("27.4471"),
        date(2025, 6, 1),
        _JUNE_2025_CUT,
    ),
    ListPrice(
        "p5.48xlarge",
        "H100-SXM",
        8,
        "us-east-1",
        Decimal("98.32"),
        date(2023, 7, 26),
        _PRICE_LIST_API,
    ),
    ListPrice(
        "p5.48xlarge",
        "H100-SXM",
        8,
        "us-east-1",
        Decimal("55.04"),
        date(2025, 6, 1),
        _JUNE_2025_CUT + " (about $55; check the Price List API)",
    ),
    # Not confirmed on-demand; capacity blocks were about $40-42 per instance-hour.
    ListPrice(
        "p5en.48xlarge",
        "H200",
        8,
        "us-east-1",
        Decimal("41.00"),
        date(2025, 6, 1),
        "EC2 Capacity Blocks price range (unconfirmed on-demand)",
    ),
    ListPrice(
        "g6.xlarge",
        "L4",
        1,
        "us-east-1",
        Decimal("0.8048"),
        date(2024, 4, 4),
        _PRICE_LIST_API,
    ),
    ListPrice(
        "g6e.xlarge",
        "L40S",
        1,
        "us-east-1",
        Decimal("1.861"),
        date(2024, 8, 15),
        _PRICE_LIST_API,
    ),
    ListPrice(
        "g5.xlarge",
        "A10G",
        1,
        "us-east-1",
        Decimal("1.006"),
        date(2021, 11, 11),
        _PRICE_LIST_API,
    ),
)


def mig_slices(profile: str) -> int:
    """Compute slices of a MIG profile name such as ``3g.40gb``."""
    head, sep, _ = profile.partition("g.")
    if not sep or not head.isdigit():
        raise ValueError(f"not a MIG profile name: {profile!r}")
    return int(head)


# Slices of a GPU without MIG profiles here; every MIG GPU but the A30 has 7.
DEFAULT_MIG_SLICES = 7


def mig_slices_per_gpu(gpu: str) -> int:
    """Compute slices of the whole GPU, from its own MIG profiles (the largest).

    ``gpu`` is a fleet GPU type ("A100-80GB") or the device name DCGM reports
    ("NVIDIA A30", "NVIDIA H100 80GB HBM3"): the family ("A30", "H100") decides,
    since every type of a family has the same slices.
    """
    family = gpu.strip().upper().removeprefix("NVIDIA ").replace(" ", "-")
    family = family.split("-")[0]
    for gpu_type, profiles in GPU_TYPES.items():
        if profiles and gpu_type.upper().split("-")[0] == family:
            return max(mig_slices(p) for p in profiles)
    return DEFAULT_MIG_SLICES
