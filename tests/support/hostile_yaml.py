"""Hostile YAML shared by the reader's, the fleet file's and the alerts' tests."""

from __future__ import annotations


def alias_bomb() -> bytes:
    """Billion laughs in fleet-file shape: nine levels of nine aliases each,
    9^9 (387 million) strings once expanded, in about 420 bytes."""
    lines = ["pools:", '  - &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"  - &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    lines += ["deployments:", "  - {name: chat, model: m, gpu_type: L4, slo: *i}"]
    return ("\n".join(lines) + "\n").encode()
