"""``manage.py calibration_import FILE --gpu H100-SXM --model Llama-3.1-8B``

Imports a calibration file or a ``vllm bench serve``/``latency`` result JSON,
validated exactly as the upload page does: a refused file stores nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from analytics.errors import InvalidInput, shown
from costapp.capacity.services import calibration_import


class Command(BaseCommand):
    help = (
        "Import a calibration (JSON file or vllm bench result) for the capacity model."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file")
        parser.add_argument("--gpu", help="GPU type the measurements ran on")
        parser.add_argument("--mig-profile", default="")
        parser.add_argument("--model", help="catalogue model name, e.g. Llama-3.1-8B")
        parser.add_argument("--weight-dtype", default="")
        parser.add_argument("--kv-dtype", default="")
        parser.add_argument("--tp", type=int, default=None)
        parser.add_argument("--engine-version", default="")
        parser.add_argument(
            "--batch-size",
            type=int,
            default=None,
            help="vllm bench latency: --batch-size used",
        )
        parser.add_argument("--input-len", type=int, default=None)
        parser.add_argument("--output-len", type=int, default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        try:
            content = path.read_bytes()
        except OSError as exc:
            raise CommandError(f"file={shown(str(path))}: {exc.strerror}") from None
        target = {
            "gpu": options["gpu"],
            "mig_profile": options["mig_profile"],
            "model": options["model"],
            "weight_dtype": options["weight_dtype"],
            "kv_dtype": options["kv_dtype"],
            "tp": options["tp"],
            "engine_version": options["engine_version"],
            "batch_size": options["batch_size"],
            "input_len": options["input_len"],
            "output_len": options["output_len"],
        }
        try:
            row = calibration_import(content=content, filename=path.name, target=target)
        except InvalidInput as exc:
            raise CommandError(f"{path.name}: {exc} (nothing stored)") from None
        fit = f"{row.fit_error:.3f}" if row.fit_error is not None else "n/a"
        self.stdout.write(f"imported calibration {row.pk}: {row} (fit MAPE {fit})")
