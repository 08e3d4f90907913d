"""Measure hardware constants with PyTorch on a GPU host (or the CPU, for tests).

    python -m analytics.capacity.harness --out constants.json [--device cuda|cpu]
        [--tiny] [--gpu-name H100-SXM] [--mig-profile 3g.40gb]

Writes a document of kind ``hardware_constants``: HBM bandwidth from a large
device-to-device copy, GEMM FLOP/s (bf16 on CUDA, fp32 on CPU) and attention time
over a grid of batch x context. These are hardware constants, not measurements of
the serving engine; ``calibration.load_calibration`` reads the file.

Importable without torch: torch is imported inside ``measure``.
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


def _timeit(fn: Callable[[], Any], sync: Callable[[], None], repeats: int) -> float:
    fn()  # warm-up: allocations, kernel selection
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def measure(
    device: str = "cuda", *, tiny: bool = False, repeats: int = 5
) -> dict[str, Any]:
    # lazy: torch is optional (requirements-harness.txt, GPU hosts only); the
    # module imports without it.
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(
            "--device cuda asked for but torch.cuda.is_available() is False"
        )
    dev = torch.device(device)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    # Bandwidth: copy a buffer far larger than any cache; read + write per byte.
    copy_bytes = (8 << 20) if tiny else (2 << 30)
    src = torch.empty(copy_bytes // 4, dtype=torch.float32, device=dev).fill_(1.0)
    dst = torch.empty_like(src)
    copy_s = _timeit(lambda s=src, d=dst: d.copy_(s), sync, repeats)  # type: ignore[misc]
    bandwidth = 2 * copy_bytes / copy_s
    del src, dst  # free before the GEMM buffers

    gemm_dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    n = 256 if tiny else 8192
    a = torch.randn(n, n, dtype=gemm_dtype, device=dev)
    b = torch.randn(n, n, dtype=gemm_dtype, device=dev)
    gemm_s = _timeit(lambda x=a, y=b: x @ y, sync, repeats)  # type: ignore[misc]
    gemm_flops = 2 * n**3 / gemm_s
    del a, b

    heads, head_dim = (4, 32) if tiny else (32, 128)
    batches = (1, 2, 4) if tiny else (1, 8, 32, 64)
    contexts = (64, 128, 256) if tiny else (512, 2048, 8192)
    attn_dtype = torch.float16 if dev.type == "cuda" else torch.float32
    grid = []
    for batch in batches:
        for context in contexts:
            q = torch.randn(batch, heads, 1, head_dim, dtype=attn_dtype, device=dev)
            k = torch.randn(
                batch, heads, context, head_dim, dtype=attn_dtype, device=dev
            )
            v = torch.randn_like(k)
            attend = functools.partial(
                torch.nn.functional.scaled_dot_product_attention, q, k, v
            )
            seconds = _timeit(attend, sync, repeats)
            grid.append({"batch": batch, "context": context, "seconds": seconds})
            del q, k, v

    name = (
        torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor()
    )
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "hardware_constants",
        "note": "hardware constants from a PyTorch micro-benchmark, not engine "
        "measurements",
        "device": {
            "type": dev.type,
            "name": name or "cpu",
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
        "tiny": tiny,
        "hbm_bandwidth_bytes_per_s": bandwidth,
        "gemm_flops": gemm_flops,
        "gemm_dtype": str(gemm_dtype).removeprefix("torch."),
        "gemm_n": n,
        "attention": grid,
        "attention_shape": {"heads": heads, "head_dim": head_dim, "query_tokens": 1},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analytics.capacity.harness")
    parser.add_argument("--out", required=True, help="where to write the JSON")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--tiny", action="store_true", help="small shapes (tests)")
    parser.add_argument(
        "--gpu-name",
        default=None,
        help="catalogue GPU name to file the constants under",
    )
    parser.add_argument("--mig-profile", default=None)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    doc = measure(args.device, tiny=args.tiny, repeats=args.repeats)
    doc["gpu"] = args.gpu_name or ("cpu" if args.device == "cpu" else None)
    doc["mig_profile"] = args.mig_profile
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(
        f"wrote {args.out}: {doc['hbm_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s, "
        f"{doc['gemm_flops'] / 1e12:.2f} TFLOP/s ({doc['gemm_dtype']})",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
