"""Calibration records shared by the loader, the fitters and the engine."""

from __future__ import annotations

from dataclasses import dataclass, field

from analytics.capacity.latency import LatencyParams

ENGINE_MEASUREMENTS = "engine_measurements"
HARDWARE_CONSTANTS = "hardware_constants"


@dataclass(frozen=True)
class CalibrationKey:
    gpu: str
    model: str | None = None
    weight_dtype: str | None = None
    kv_dtype: str | None = None
    tp: int | None = None
    engine_version: str | None = None
    mig_profile: str | None = None

    @property
    def label(self) -> str:
        target = self.gpu + (f"/{self.mig_profile}" if self.mig_profile else "")
        parts = [target, self.model, self.weight_dtype, self.kv_dtype]
        if self.tp is not None:
            parts.append(f"tp{self.tp}")
        if self.engine_version:
            parts.append(f"vllm {self.engine_version}")
        return " ".join(p for p in parts if p)


@dataclass(frozen=True)
class FitQuality:
    n_points: int
    mape: float | None
    r2: float | None
    method: str

    def as_dict(self) -> dict[str, object]:
        return {
            "n_points": self.n_points,
            "mape": self.mape,
            "r2": self.r2,
            "method": self.method,
        }


@dataclass(frozen=True)
class Calibration:
    kind: str
    key: CalibrationKey
    params: LatencyParams
    fit: FitQuality
    source: str = ""
    schema_version: int = 1
    points: tuple[dict[str, float], ...] = field(default_factory=tuple)

    @property
    def label(self) -> str:
        return f"{self.kind}: {self.key.label}"
