"""The one reader for YAML files a user hands in (the fleet file), and the one
error for such a file refused whole (``FileProblems``).

PyYAML's safe loader builds only plain objects, but bounds nothing: 575 bytes of
anchors and aliases ("billion laughs") expand to 9^9 strings the moment
anything walks or formats the result, and a UTF-16, binary or 10,000-deep
``[[[...`` file fails with a traceback from deep inside the parser. This reader
refuses, before anything else sees the document, and names the file, the
line and the column (never the document itself):

- files over ``MAX_BYTES`` (1 MiB; a fleet of a hundred deployments is 40 kB),
  from the size on disk, then reading at most that much;
- bytes that are not UTF-8 text: a NUL byte (binary, or UTF-16/32 without a
  byte-order mark), a UTF-16/32 byte-order mark, an undecodable byte;
- nesting deeper than ``MAX_DEPTH`` (32; a fleet file needs 5);
- more than ``MAX_ALIASES`` aliases (``*name``; 100, room for a ``<<: *defaults``
  per entry), and a document that, with every alias expanded, holds more than
  ``MAX_NODES`` values (100,000) or ``MAX_SCALAR_CHARS`` characters of
  scalars (4 MiB): that counts what the aliases would grow to, as they are
  composed, so the 9-level bomb stops at its 6th level;
- numbers longer than ``MAX_NUMBER_CHARS`` (64) characters, and scalars a
  constructor cannot read (``2026-13-45`` as a date), named where they are.

libyaml (``CParser``) scans and parses when PyYAML has it; composing is
PyYAML's Python ``Composer`` with the counting above, since libyaml's own
composer cannot be hooked. An 850 kB file takes 0.64 s, against 0.42 s with
``CSafeLoader`` and 2.5 s with the pure-Python ``SafeLoader``; the demo fleet
(4 kB) takes 2 ms. Nothing here imports Django.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import yaml
import yaml.reader
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, ScalarEvent
from yaml.nodes import Node, ScalarNode
from yaml.resolver import Resolver

try:  # libyaml's scanner and parser, much faster than PyYAML's own
    from yaml._yaml import CParser

    _LIBYAML = True
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    _LIBYAML = False

MAX_BYTES = 1024 * 1024
MAX_DEPTH = 32
MAX_ALIASES = 100
MAX_NODES = 100_000
MAX_SCALAR_CHARS = 4 * 1024 * 1024
MAX_NUMBER_CHARS = 64
REASON_CHARS = 200  # a parser's reason may quote a tag or an anchor name

_BOMS = (  # longest first: the UTF-32 LE mark begins with the UTF-16 LE one
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


class YamlFileError(ValueError):
    """A YAML file refused; ``str()`` is ``name: line L, column C: reason``."""

    def __init__(
        self, name: str, reason: str, *, line: int | None = None, column: int = 0
    ) -> None:
        self.name = name
        self.reason = reason
        self.line = line
        self.column = column
        where = ""
        if line is not None:
            where = f"line {line}, column {column}: " if column else f"line {line}: "
        super().__init__(f"{name}: {where}{reason}")


# What a refusal lists: a file of 10,000 bad entries, or one naming a 100 kB
# value, still prints as a screenful (``problems`` keeps them all).
SHOWN_PROBLEMS = 100
SHOWN_PROBLEM_CHARS = 500


def _problem_line(problem: str) -> str:
    if len(problem) <= SHOWN_PROBLEM_CHARS:
        return problem
    return problem[: SHOWN_PROBLEM_CHARS - 1] + "…"


class FileProblems(ValueError):
    """A file a user hands in, refused whole: ``problems`` is every mistake
    found (entry, field, value), ``section`` the part of the file they are in
    (``alerts:``), if not the whole. Nothing of the file was loaded."""

    def __init__(self, path: str, problems: list[str], *, section: str = "") -> None:
        self.path = path
        self.problems = problems
        self.section = section
        lines = [_problem_line(p) for p in problems[:SHOWN_PROBLEMS]]
        if len(problems) > SHOWN_PROBLEMS:
            lines.append(f"... and {len(problems) - SHOWN_PROBLEMS} more")
        where = f" in {section}" if section else ""
        super().__init__(
            f"{path}: {len(problems)} problem(s){where}, nothing was loaded:\n  "
            + "\n  ".join(lines)
        )


class _Refused(yaml.MarkedYAMLError):
    """A limit reached while composing or constructing, at a mark."""


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


class _BoundedComposer(Composer):
    """Composer that counts what the document holds once aliases expand."""

    peek_event: Callable[[], Any]  # the parser's, beside this class in the loader

    def __init__(self) -> None:
        Composer.__init__(self)
        self._depth = 0
        self._aliases = 0
        self._nodes = 0
        self._chars = 0
        # Anchor -> (values, scalar characters) of its node, aliases expanded;
        # absent while the anchored node is still being composed.
        self._weights: dict[str, tuple[int, int]] = {}

    def _grow(self, nodes: int, chars: int, mark: Any) -> None:
        self._nodes += nodes
        self._chars += chars
        if self._nodes > MAX_NODES:
            raise _Refused(
                problem=f"more than {MAX_NODES:,} values with every alias expanded",
                problem_mark=mark,
            )
        if self._chars > MAX_SCALAR_CHARS:
            raise _Refused(
                problem=f"more than {MAX_SCALAR_CHARS:,} characters of text with "
                "every alias expanded",
                problem_mark=mark,
            )

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        mark: Any = event.start_mark  # yaml.error.Mark, or libyaml's own
        if isinstance(event, AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _Refused(
                    problem=f"more than {MAX_ALIASES} aliases (*name)",
                    problem_mark=mark,
                )
            alias = str(event.anchor)
            if alias in self.anchors:
                if alias not in self._weights:
                    raise _Refused(
                        problem="an alias inside its own anchor (a structure that "
                        "contains itself)",
                        problem_mark=mark,
                    )
                self._grow(*self._weights[alias], mark)
            return cast(Node, super().compose_node(parent, index))
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused(
                problem=f"nested more than {MAX_DEPTH} levels deep", problem_mark=mark
            )
        before = (self._nodes, self._chars)
        self._grow(1, len(event.value) if isinstance(event, ScalarEvent) else 0, mark)
        node = cast(Node, super().compose_node(parent, index))
        self._depth -= 1
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._weights[str(anchor)] = (
                self._nodes - before[0],
                self._chars - before[1],
            )
        return node


class _BoundedConstructor(SafeConstructor):
    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, OverflowError) as exc:
            # ``2026-13-45`` matches the date pattern but is no date.
            raise _Refused(
                problem=f"cannot read this value: {exc}", problem_mark=node.start_mark
            ) from None

    def construct_number(self, node: Node) -> Any:
        assert isinstance(node, ScalarNode)
        if len(node.value) > MAX_NUMBER_CHARS:
            raise _Refused(
                problem=f"a number of {len(node.value):,} characters; at most "
                f"{MAX_NUMBER_CHARS}",
                problem_mark=node.start_mark,
            )
        if node.tag.endswith(":int"):
            return self.construct_yaml_int(node)
        return self.construct_yaml_float(node)


_BoundedConstructor.yaml_constructors = {
    **SafeConstructor.yaml_constructors,
    "tag:yaml.org,2002:int": _BoundedConstructor.construct_number,
    "tag:yaml.org,2002:float": _BoundedConstructor.construct_number,
}


if _LIBYAML:

    class _Loader(_BoundedComposer, CParser, _BoundedConstructor, Resolver):
        # The composer comes first: CParser has its own (unhookable) get_node.
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _BoundedComposer.__init__(self)
            _BoundedConstructor.__init__(self)
            Resolver.__init__(self)

else:  # pragma: no cover
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Loader(  # type: ignore[no-redef]
        Reader, Scanner, Parser, _BoundedComposer, _BoundedConstructor, Resolver
    ):
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
            _BoundedComposer.__init__(self)
            _BoundedConstructor.__init__(self)
            Resolver.__init__(self)


def _text(content: bytes, name: str) -> str:
    for bom, encoding in _BOMS:
        if content.startswith(bom):
            raise YamlFileError(
                name,
                f"is {encoding} text (it starts with a {encoding} byte-order mark); "
                "save it as UTF-8",
                line=1,
            )
    nul = content.find(b"\x00")
    if nul >= 0:
        raise YamlFileError(
            name,
            f"contains a NUL byte (at byte {nul:,}): a binary file or UTF-16/32 "
            "text, not UTF-8 YAML",
            line=content.count(b"\n", 0, nul) + 1,
        )
    try:
        return content.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise YamlFileError(
            name,
            f"is not UTF-8 text: byte 0x{content[exc.start]:02x} at byte "
            f"{exc.start:,} cannot be decoded",
            line=content.count(b"\n", 0, exc.start) + 1,
        ) from None


def yaml_load(content: bytes, *, name: str, max_bytes: int = MAX_BYTES) -> Any:
    """The one document in ``content`` (``None`` when empty), within the limits
    above; anything else raises ``YamlFileError`` naming ``name``."""
    if len(content) > max_bytes:
        raise YamlFileError(
            name, f"is {len(content):,} bytes, larger than {max_bytes:,}"
        )
    text = _text(content, name)
    loader = None
    try:
        loader = _Loader(text)  # PyYAML's own reader checks characters here
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        reason = exc.problem or exc.context or "not valid YAML"
        if exc.problem and exc.context:
            at = exc.context_mark
            if at is not None and at is not mark:
                reason += f" ({exc.context} at line {at.line + 1})"
            else:
                reason += f" ({exc.context})"
        raise YamlFileError(
            name,
            _cut(reason),
            line=mark.line + 1 if mark else None,
            column=mark.column + 1 if mark else 0,
        ) from None
    except yaml.reader.ReaderError as exc:  # a control character: no mark, a position
        line = text.encode().count(b"\n", 0, max(exc.position, 0)) + 1
        raise YamlFileError(
            name, _cut(f"character #x{exc.character:04x}: {exc.reason}"), line=line
        ) from None
    except yaml.YAMLError as exc:
        raise YamlFileError(name, _cut(f"not valid YAML: {exc}")) from None
    except (ValueError, TypeError, OverflowError) as exc:  # a constructor's, unmarked
        raise YamlFileError(name, _cut(f"cannot read a value: {exc}")) from None
    except RecursionError:  # the depth limit stops far short of this
        raise YamlFileError(name, f"nested more than {MAX_DEPTH} levels deep") from None
    finally:
        if loader is not None:
            loader.dispose()


def yaml_file_load(
    path: str | Path, *, name: str | None = None, max_bytes: int = MAX_BYTES
) -> Any:
    """``yaml_load`` of the file at ``path`` (named ``name`` in messages, the
    path itself by default); its size is checked before it is read, and no
    more than ``max_bytes`` + 1 bytes are read (a device, a file that grows)."""
    path = Path(path)
    name = str(path) if name is None else name
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise YamlFileError(name, f"is {size:,} bytes, larger than {max_bytes:,}")
        with path.open("rb") as handle:
            content = handle.read(max_bytes + 1)
    except OSError as exc:
        raise YamlFileError(
            name, f"cannot read the file: {exc.strerror or exc}"
        ) from None
    return yaml_load(content, name=name, max_bytes=max_bytes)
