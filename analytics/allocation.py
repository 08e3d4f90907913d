"""Allocate every cent of a bill day to deployments, pool idle or unallocated.

Pure: Decimal in, Decimal out, no Django, no clock. The one invariant is that
for each account and day

    sum(deployment shares) + sum(pool idle) + unallocated == sum(bill lines)

exactly, at the stored precision (12 decimal places). Each line is split with
largest-remainder rounding in quanta of 1e-12, so no rounding residue is lost or
invented, and shares of a non-negative line are never negative.

Which rule claims a line (first match wins, in this order):

1. a deployment or pool rule on the line's ``resource_id``;
2. a rule on the line's cost allocation tag (``tag_key`` = ``tag_value``);
3. a rule on the line's ``usage_type``;
4. a declared shared overhead (egress, storage I/O) matching the line, spread
   over deployments by its declared key;
5. nothing: the line is ``__unallocated__`` and stays visible.

Several rules of the same precedence claiming one line split it evenly (that is
ambiguous configuration; a pool is the way to share a node group). A pool's
lines go to its deployments in proportion to the pool's key (measured GPU-hours,
MIG already weighted by slices/7, or finished requests) for the part of the
paid capacity they used; node GPU-hours nobody used are the pool's ``__idle__``.
Credits and refunds (negative lines) follow exactly the same rules, so a credit
on a tagged line reduces that deployment's cost; an untagged account-wide credit
stays unallocated rather than being guessed onto someone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Literal

QUANTUM = Decimal("1e-12")  # CostLine stores 12 decimal places
IDLE = "__idle__"
UNALLOCATED = "__unallocated__"

RuleKind = Literal["resource_id", "tag", "usage_type", "service"]
KeyKind = Literal["gpu_hours", "requests", "cost"]
_PRECEDENCE: dict[str, int] = {"resource_id": 0, "tag": 1, "usage_type": 2}


class AllocationError(ValueError):
    pass


@dataclass(frozen=True)
class BillLine:
    """One bill line of one account and day, in the chosen cost basis."""

    key: str  # anything that identifies the line to the caller
    amount: Decimal
    usage_type: str = ""
    resource_id: str = ""
    tag_key: str = ""
    tag_value: str = ""
    service: str = ""
    record_type: str = "usage"
    # Paid quantity in hours (instance-hours) when the line is a node line.
    usage_hours: Decimal | None = None


@dataclass(frozen=True)
class Rule:
    """``target`` (a deployment, or a pool when ``pool`` is True) claims lines
    whose ``kind`` field equals ``value`` (and ``tag_key`` for tags)."""

    target: str
    kind: RuleKind
    value: str
    tag_key: str = ""
    pool: bool = False

    def matches(self, line: BillLine) -> bool:
        if self.kind == "resource_id":
            return bool(line.resource_id) and line.resource_id == self.value
        if self.kind == "tag":
            return line.tag_key == self.tag_key and line.tag_value == self.value
        if self.kind == "usage_type":
            return bool(line.usage_type) and line.usage_type == self.value
        return bool(line.service) and line.service == self.value


@dataclass(frozen=True)
class Overhead:
    """A shared overhead (egress, storage I/O): lines it matches are spread
    over ``pool``'s deployments (or every deployment with usage when ``pool``
    is empty) in proportion to ``key``; ``cost`` means each deployment's cost
    directly or pool-allocated the same day."""

    kind: RuleKind
    value: str
    key: KeyKind = "gpu_hours"
    tag_key: str = ""
    pool: str = ""

    def matches(self, line: BillLine) -> bool:
        return Rule("", self.kind, self.value, self.tag_key).matches(line)


@dataclass(frozen=True)
class PoolUsage:
    """A pool's members and what each measured that day."""

    name: str
    key: Literal["gpu_hours", "requests"] = "gpu_hours"
    gpus_per_node: int = 8
    members: tuple[str, ...] = ()


@dataclass(frozen=True)
class DayUsage:
    """Measured usage per deployment for the day (telemetry)."""

    gpu_hours: Mapping[str, Decimal] = field(default_factory=dict)
    requests: Mapping[str, Decimal] = field(default_factory=dict)


@dataclass(frozen=True)
class Share:
    line_key: str
    target: str  # deployment name, IDLE or UNALLOCATED
    amount: Decimal
    how: Literal["direct", "pool", "idle", "overhead", "unallocated"]
    pool: str = ""


@dataclass(frozen=True)
class DayAllocation:
    total: Decimal
    shares: tuple[Share, ...]

    def by_target(self) -> dict[str, Decimal]:
        """Deployment -> amount; idle keyed ``pool/__idle__``; unallocated."""
        out: dict[str, Decimal] = {}
        for share in self.shares:
            name = f"{share.pool}/{IDLE}" if share.target == IDLE else share.target
            out[name] = out.get(name, Decimal(0)) + share.amount
        return out

    @property
    def allocated(self) -> Decimal:
        return _sum(
            s.amount for s in self.shares if s.target not in {IDLE, UNALLOCATED}
        )

    @property
    def idle(self) -> Decimal:
        return _sum(s.amount for s in self.shares if s.target == IDLE)

    @property
    def unallocated(self) -> Decimal:
        return _sum(s.amount for s in self.shares if s.target == UNALLOCATED)


def _sum(values: Iterable[Decimal]) -> Decimal:
    total = Decimal(0)
    for v in values:
        total += v
    return total


def quantize(amount: Decimal) -> Decimal:
    """Amount at stored precision; refuses amounts that would need rounding
    so a caller never reconciles against a figure the database does not hold."""
    q = amount.quantize(QUANTUM)
    if q != amount:
        raise AllocationError(
            f"amount {amount} has more than 12 decimal places (stored precision)"
        )
    return q


def split(amount: Decimal, weights: Sequence[tuple[str, Fraction]]) -> list[Decimal]:
    """Split ``amount`` by ``weights`` into 1e-12 quanta, largest remainder.

    The parts sum to ``amount`` exactly; each part has the sign of ``amount``
    (so a non-negative amount never yields a negative part). Ties go to the
    earlier name, which makes the split deterministic.
    """
    if not weights:
        raise AllocationError("nothing to split the amount between")
    if any(w < 0 for _, w in weights):
        raise AllocationError("negative allocation weight")
    total_w = sum((w for _, w in weights), Fraction(0))
    if total_w <= 0:
        raise AllocationError("allocation weights sum to zero")
    sign = -1 if amount < 0 else 1
    quanta = int((abs(amount) / QUANTUM).to_integral_value())
    exact = [Fraction(quanta) * w / total_w for _, w in weights]
    floors = [int(x) for x in exact]  # x >= 0, so int() is floor
    left = quanta - sum(floors)
    order = sorted(
        range(len(weights)),
        key=lambda i: (-(exact[i] - floors[i]), weights[i][0], i),
    )
    for i in order[:left]:
        floors[i] += 1
    return [Decimal(sign * q) * QUANTUM for q in floors]


def _frac(value: Decimal | float | int) -> Fraction:
    return Fraction(Decimal(str(value)) if isinstance(value, float) else value)


def _claimants(line: BillLine, rules: Sequence[Rule]) -> list[Rule]:
    best: list[Rule] = []
    best_rank = 99
    for rule in rules:
        if rule.kind == "service" or not rule.matches(line):
            continue
        rank = _PRECEDENCE[rule.kind]
        if rank < best_rank:
            best, best_rank = [rule], rank
        elif rank == best_rank and rule not in best:
            best.append(rule)
    return best


def _pool_weights(
    pool: PoolUsage,
    usage: DayUsage,
    capacity_gpu_hours: Fraction | None,
) -> list[tuple[str, Fraction]]:
    """Deployment weights plus IDLE for one pool's lines.

    The used fraction comes from measured GPU-hours against paid capacity; the
    used part is split by the pool's key. Measured use above the paid capacity
    (clock skew, a late node line) caps at 100% rather than making idle
    negative.
    """
    used = {m: _frac(usage.gpu_hours.get(m, 0)) for m in pool.members}
    used = {m: v for m, v in used.items() if v > 0}
    used_total = sum(used.values(), Fraction(0))
    if used_total <= 0:
        return [(IDLE, Fraction(1))]
    if pool.key == "requests":
        keyed = {m: _frac(usage.requests.get(m, 0)) for m in pool.members}
        keyed = {m: v for m, v in keyed.items() if v > 0}
        if not keyed:  # used GPUs but finished no request: fall back to GPU-hours
            keyed = used
    else:
        keyed = used
    key_total = sum(keyed.values(), Fraction(0))
    if capacity_gpu_hours is not None and capacity_gpu_hours > 0:
        used_frac = min(Fraction(1), used_total / capacity_gpu_hours)
    else:
        used_frac = Fraction(1)
    weights = [(m, used_frac * v / key_total) for m, v in sorted(keyed.items())]
    if used_frac < 1:
        weights.append((IDLE, 1 - used_frac))
    return weights


def allocate_day(
    *,
    lines: Sequence[BillLine],
    rules: Sequence[Rule] = (),
    pools: Sequence[PoolUsage] = (),
    overheads: Sequence[Overhead] = (),
    usage: DayUsage | None = None,
) -> DayAllocation:
    """Allocate one account's bill lines for one day; see the module docstring."""
    usage = usage or DayUsage()
    pools_by_name = {p.name: p for p in pools}
    lines = [
        BillLine(**{**line.__dict__, "amount": quantize(line.amount)}) for line in lines
    ]
    shares: list[Share] = []
    overhead_lines: list[tuple[BillLine, Overhead]] = []

    # Paid pool capacity: node-hour lines claimed by the pool x GPUs per node.
    pool_lines: dict[str, list[tuple[BillLine, Decimal]]] = {}
    capacity: dict[str, Fraction] = {}

    for line in lines:
        claim = _claimants(line, rules)
        if claim:
            even = Fraction(1, len(claim))
            for rule, amount in zip(
                claim,
                split(line.amount, [(r.target, even) for r in claim]),
                strict=True,
            ):
                if rule.pool:
                    pool_lines.setdefault(rule.target, []).append((line, amount))
                    if line.usage_hours is not None and line.amount > 0:
                        gpus = pools_by_name.get(rule.target, PoolUsage(rule.target))
                        capacity[rule.target] = (
                            capacity.get(rule.target, Fraction(0))
                            + even * _frac(line.usage_hours) * gpus.gpus_per_node
                        )
                else:
                    shares.append(Share(line.key, rule.target, amount, "direct"))
            continue
        overhead = next((o for o in overheads if o.matches(line)), None)
        if overhead is not None:
            overhead_lines.append((line, overhead))
        else:
            shares.append(Share(line.key, UNALLOCATED, line.amount, "unallocated"))

    for pool_name, claimed in pool_lines.items():
        pool = pools_by_name.get(pool_name, PoolUsage(pool_name))
        weights = _pool_weights(pool, usage, capacity.get(pool_name))
        for line, amount in claimed:
            for (target, _), part in zip(weights, split(amount, weights), strict=True):
                how: Literal["pool", "idle"] = "idle" if target == IDLE else "pool"
                shares.append(Share(line.key, target, part, how, pool=pool_name))

    # Overheads last: a "cost" key needs the day's direct and pool shares.
    direct_cost: dict[str, Fraction] = {}
    for share in shares:
        if share.how in {"direct", "pool"}:
            direct_cost[share.target] = direct_cost.get(
                share.target, Fraction(0)
            ) + Fraction(share.amount)
    for line, overhead in overhead_lines:
        weights = _overhead_weights(overhead, pools_by_name, usage, direct_cost)
        if not weights:
            shares.append(Share(line.key, UNALLOCATED, line.amount, "unallocated"))
            continue
        for (target, _), part in zip(weights, split(line.amount, weights), strict=True):
            shares.append(Share(line.key, target, part, "overhead", pool=overhead.pool))

    total = _sum(line.amount for line in lines)
    return DayAllocation(total=total, shares=tuple(shares))


def _overhead_weights(
    overhead: Overhead,
    pools: Mapping[str, PoolUsage],
    usage: DayUsage,
    direct_cost: Mapping[str, Fraction],
) -> list[tuple[str, Fraction]]:
    if overhead.pool:
        pool = pools.get(overhead.pool)
        members: Iterable[str] = pool.members if pool else ()
    else:
        members = set(usage.gpu_hours) | set(usage.requests) | set(direct_cost)
    if overhead.key == "gpu_hours":
        raw = {m: _frac(usage.gpu_hours.get(m, 0)) for m in members}
    elif overhead.key == "requests":
        raw = {m: _frac(usage.requests.get(m, 0)) for m in members}
    else:
        raw = {m: direct_cost.get(m, Fraction(0)) for m in members}
    weights = [(m, w) for m, w in sorted(raw.items()) if w > 0]
    if not weights and overhead.pool and overhead.pool in pools:
        # Nobody used the pool that day: its overhead is the pool's idle.
        return [(IDLE, Fraction(1))]
    return weights
