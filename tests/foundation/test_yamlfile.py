"""The one YAML reader: a hostile file is refused with the file, the line and a
short reason, in bounded time and memory, and never reaches its caller."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from costapp.yamlfile import (
    MAX_ALIASES,
    MAX_BYTES,
    MAX_DEPTH,
    YamlFileError,
    yaml_file_load,
    yaml_load,
)
from tests.support.hostile_yaml import alias_bomb

pytestmark = pytest.mark.smoke

ROOT = Path(__file__).resolve().parents[2]


# Runs in a fresh interpreter: the peak is the child's own. ru_maxrss is kept
# across fork and exec (it starts at the parent's size), so the child also
# reads VmHWM, the peak of its own address space, where Linux has it.
CHILD = r"""
import json, resource, sys, time
from costapp.yamlfile import YamlFileError, yaml_load

def vm_hwm_kib():
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None

bomb = sys.stdin.buffer.read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
try:
    yaml_load(bomb, name="fleet.yaml")
    message = None
except YamlFileError as exc:
    message = str(exc)
seconds = time.perf_counter() - start
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "maxrss_growth_kib": after - before,
                  "maxrss_kib": after, "vm_hwm_kib": vm_hwm_kib(),
                  "message": message}))
"""


def test_the_alias_bomb_is_refused_in_under_2_s_and_100_mb() -> None:
    bomb = alias_bomb()
    assert 300 < len(bomb) < 600
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=bomb,
        capture_output=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    figures = json.loads(done.stdout)
    assert figures["message"] is not None, "the bomb was loaded"
    assert figures["message"].startswith("fleet.yaml: line ")
    assert "with every alias expanded" in figures["message"]
    assert figures["seconds"] < 2.0
    assert figures["maxrss_growth_kib"] < 100 * 1024
    if figures["vm_hwm_kib"] is not None:  # the child's whole peak, imports included
        assert figures["vm_hwm_kib"] < 100 * 1024


def test_the_bomb_is_never_expanded_into_the_message() -> None:
    with pytest.raises(YamlFileError) as refused:
        yaml_load(alias_bomb(), name="fleet.yaml")
    assert len(str(refused.value)) < 200
    assert "lol" not in str(refused.value)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (bytes(range(256)) * 8, "line 1: contains a NUL byte (at byte 0)"),
        ("pools: []\n".encode("utf-16"), "is UTF-16 text"),
        ("pools: []\n".encode("utf-16-be"), "contains a NUL byte (at byte 0)"),
        ("pools: []\n".encode("utf-32"), "is UTF-32 text"),
        ("a: 1\nteam: caf\xe9\n".encode("latin-1"), "line 2: is not UTF-8 text: byte 0xe9"),
        (b"[" * 10_000 + b"]" * 10_000, "nesting depth"),
        (b"[" * 40 + b"]" * 40, f"nested more than {MAX_DEPTH} levels deep"),
        (
            "".join(" " * i + "-\n" for i in range(0, 80, 2)).encode(),
            f"line {MAX_DEPTH + 1}, column {2 * MAX_DEPTH + 1}: nested more than",
        ),
        (b"a: &a [1, *a]\n", "an alias inside its own anchor"),
        (
            b"a: &a 1\nb: [" + b", ".join([b"*a"] * (MAX_ALIASES + 1)) + b"]\n",
            f"more than {MAX_ALIASES} aliases",
        ),
        (b"n: " + b"9" * 5000 + b"\n", "line 1, column 4: a number of 5,000 characters"),
        (b"day: 2026-13-45\n", "cannot read this value: month must be in 1..12"),
        (b"a: \x01\n", "line 1: character #x0001: control characters are not allowed"),
        (b"a: [1, 2\nb: c\n", "line 2, column 2: did not find expected ',' or ']'"),
        (b"a: *nope\n", "found undefined alias 'nope'"),
        (b"a: !!python/object:os.system x\n", "could not determine a constructor"),
        (b"a: 1\n---\nb: 2\n", "expected a single document"),
        (b"x: " + b"y" * 100 + b"\n" + b"- " * 200_000, "line 2"),
    ],
    ids=[
        "binary", "utf-16", "utf-16 without BOM", "utf-32", "latin-1",
        "10,000 levels of [", "40 levels of [", "40 levels of block lists",
        "recursive alias", "too many aliases", "5,000-digit number", "no such date",
        "control character", "not YAML", "undefined alias", "python tag",
        "two documents", "deep dashes",
    ],
)  # fmt: skip
def test_a_hostile_file_is_refused_naming_the_file_and_where(
    content: bytes, said: str
) -> None:
    with pytest.raises(YamlFileError) as refused:
        yaml_load(content, name="fleet.yaml")
    message = str(refused.value)
    assert message.startswith("fleet.yaml: ")
    assert said in message
    assert len(message) < 400


def test_the_size_is_checked_before_the_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_bytes(b"# padding\n" * (MAX_BYTES // 10 + 1))
    with pytest.raises(YamlFileError, match=r"larger than 1,048,576"):
        yaml_file_load(path, name="fleet.yaml")
    with pytest.raises(YamlFileError, match=r"fleet.yaml: is 13 bytes, larger than 8"):
        yaml_load(b"pools: []\n# x", name="fleet.yaml", max_bytes=8)
    with pytest.raises(YamlFileError, match="cannot read the file"):
        yaml_file_load(tmp_path / "missing.yaml", name="missing.yaml")
    with pytest.raises(YamlFileError, match="cannot read the file"):
        yaml_file_load(tmp_path, name="a folder")


def test_anchors_and_merge_keys_within_the_limits_load() -> None:
    text = b"""
defaults: &defaults {engine: vllm, gpu_type: L4, region: us-east-1}
deployments:
  - {<<: *defaults, name: a}
  - {<<: *defaults, name: b, gpu_type: L40S}
"""
    data = yaml_load(text, name="fleet.yaml")
    assert data["deployments"][1] == {
        "engine": "vllm", "gpu_type": "L40S", "region": "us-east-1", "name": "b"
    }  # fmt: skip
    assert yaml_load(b"", name="empty.yaml") is None
    assert yaml_load(b"\xef\xbb\xbfa: 1\n", name="bom.yaml") == {"a": 1}


@pytest.mark.parametrize(
    "path",
    [ROOT / "docs" / "fleet.example.yaml", ROOT / "costapp/fleet/demo_fleet.yaml"],
    ids=["example", "demo"],
)
def test_it_reads_the_shipped_fleet_files_as_pyyaml_does(path: Path) -> None:
    assert yaml_file_load(path) == yaml.safe_load(path.read_text())


@given(st.binary(max_size=300))
def test_any_bytes_load_or_are_refused_cleanly(content: bytes) -> None:
    try:
        yaml_load(content, name="fuzz.yaml")
    except YamlFileError as exc:
        assert str(exc).startswith("fuzz.yaml: ")


@given(
    st.text(
        alphabet=st.sampled_from(list("[]{}:-,&*!|>'\"#%@ \n\tab01.~?<")),
        max_size=200,
    )
)
def test_any_yaml_punctuation_loads_or_is_refused_cleanly(text: str) -> None:
    try:
        yaml_load(text.encode(), name="fuzz.yaml")
    except YamlFileError as exc:
        assert str(exc).startswith("fuzz.yaml: ")
