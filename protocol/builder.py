"""Every message as a construct, built from its declaration: the reference codec.

``struct_for(message, version)`` turns one version of a ``protocol.schema`` declaration
into a construct made of the ``protocol.types`` building blocks: which fields exist,
which are nullable, whether strings and arrays are compact and whether the struct ends
in a tagged-field section. It is exact but slow; ``protocol.compiler`` generates the fast
codecs from the same declarations, and the tests hold the two byte-for-byte equal.
"""

from __future__ import annotations

import io
from functools import cache
from typing import Any

from construct import Construct, Container, stream_read, stream_write

from protocol.schema import UNKNOWN_TAGS, Array, Field, FieldType, Message, Struct, Versions, has_unknown_tags
from protocol.types import (
    BOOLEAN,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    UINT16,
    UUID,
    KafkaArray,
    KafkaBytes,
    KafkaString,
    WireError,
    parse_uvarint,
)
from protocol.varint import encode_uvarint

__all__ = ["MessageStruct", "build_struct", "struct_for"]

_MISSING: Any = object()

_FIXED: dict[str, Construct] = {
    "bool": BOOLEAN,
    "int8": INT8,
    "int16": INT16,
    "uint16": UINT16,
    "int32": INT32,
    "int64": INT64,
    "float64": FLOAT64,
    "uuid": UUID,
}

_STRUCTS: dict[tuple[Message, int], Construct] = {}


def struct_for(message: Message, version: int) -> Construct:
    """The construct of ``message`` at ``version`` (built once, then cached)."""
    built = _STRUCTS.get((message, version))
    if built is None:
        if not message.has_version(version):
            raise ValueError(f"{message.name} has no version {version}")
        built = build_struct(message.fields, version, message.is_flexible(version))
        _STRUCTS[(message, version)] = built
    return built


class MessageStruct(Construct):
    """A Kafka struct: fields in order, then (flexible versions) the tagged-field section.

    Known tagged fields are parsed into named keys; unknown ones are kept, raw, under
    ``UNKNOWN_TAGS`` as ``{tag: bytes}`` and re-emitted in tag order on build.
    """

    def __init__(
        self,
        fields: list[tuple[str, Construct, Field]],
        tagged: dict[int, tuple[str, Construct, Field]],
        flexible: bool,
        version: int,
    ) -> None:
        super().__init__()
        self.fields = fields
        self.tagged = tagged
        self.flexible = flexible
        self.version = version

    def _parse(self, stream: Any, context: Any, path: str) -> Container:
        obj = Container()
        for name, sub, _ in self.fields:
            obj[name] = sub._parsereport(stream, context, path)
        if not self.flexible:
            return obj
        for name, _, decl in self.tagged.values():
            obj[name] = decl.default_value(self.version)
        count = parse_uvarint(stream, path)
        unknown: dict[int, bytes] = {}
        previous = -1
        for _ in range(count):
            tag = parse_uvarint(stream, path)
            size = parse_uvarint(stream, path)
            if tag <= previous:
                raise WireError(f"tagged fields out of order (tag {tag})", path=path)
            previous = tag
            raw = stream_read(stream, size, path)
            known = self.tagged.get(tag)
            if known is None:
                unknown[tag] = bytes(raw)
                continue
            inner = io.BytesIO(raw)
            obj[known[0]] = known[1]._parsereport(inner, context, path)
            if inner.tell() != size:
                raise WireError(f"tagged field {tag} has trailing bytes", path=path)
        if unknown:
            obj[UNKNOWN_TAGS] = unknown
        return obj

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        if not isinstance(obj, dict):
            raise WireError(f"struct expected, got {type(obj).__name__}", path=path)
        for name, sub, decl in self.fields:
            value = obj.get(name, _MISSING)
            if value is _MISSING:
                value = decl.default_value(self.version)
            sub._build(value, stream, context, path)
        if not self.flexible:
            return obj
        out: list[tuple[int, bytes]] = []
        for tag, (name, sub, decl) in self.tagged.items():
            value = obj.get(name, _MISSING)
            if value is _MISSING or (
                value == decl.default_value(self.version) and not has_unknown_tags(value)
            ):
                continue
            inner = io.BytesIO()
            sub._build(value, inner, context, path)
            out.append((tag, inner.getvalue()))
        unknown = obj.get(UNKNOWN_TAGS)
        if unknown:
            out.extend((tag, bytes(raw)) for tag, raw in unknown.items() if tag not in self.tagged)
        out.sort()
        section = bytearray(encode_uvarint(len(out)))
        for tag, raw in out:
            section += encode_uvarint(tag)
            section += encode_uvarint(len(raw))
            section += raw
        stream_write(stream, bytes(section), len(section), path)
        return obj


def _construct_for(decl: Field, type_: FieldType, version: int, flexible: bool) -> Construct:
    nullable = version in Versions.parse(decl.nullable)
    compact = flexible if decl.flexible is None else version in Versions.parse(decl.flexible)
    if isinstance(type_, Array):
        if isinstance(type_.of, Struct):
            element = build_struct(type_.of.fields, version, flexible)
        else:
            element = _construct_for(decl, type_.of, version, flexible)
            if isinstance(element, (KafkaString, KafkaBytes)):
                element = type(element)(nullable=False, compact=compact)
        return KafkaArray(element, nullable=nullable, compact=compact)
    if isinstance(type_, Struct):
        inner = build_struct(type_.fields, version, flexible)
        if nullable:
            return _NullableStruct(inner)
        return inner
    if type_.name == "string":
        return KafkaString(nullable=nullable, compact=compact)
    if type_.name in ("bytes", "records"):
        return KafkaBytes(nullable=nullable or type_.name == "records", compact=compact)
    return _FIXED[type_.name]


class _NullableStruct(Construct):
    """A nullable nested struct: an int8 marker (-1 null, 1 present), then the struct."""

    def __init__(self, inner: Construct) -> None:
        super().__init__()
        self.inner = inner

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        marker = INT8._parsereport(stream, context, path)
        if marker < 0:
            return None
        return self.inner._parsereport(stream, context, path)

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        if obj is None:
            INT8._build(-1, stream, context, path)
            return obj
        INT8._build(1, stream, context, path)
        return self.inner._build(obj, stream, context, path)


@cache
def build_struct(fields: tuple[Field, ...], version: int, flexible: bool) -> MessageStruct:
    """Build the construct for a field table at one version."""
    plain: list[tuple[str, Construct, Field]] = []
    tagged: dict[int, tuple[str, Construct, Field]] = {}
    for decl in fields:
        if not decl.present_in(version):
            continue
        sub = _construct_for(decl, decl.type, version, flexible)
        if flexible and decl.is_tagged_in(version):
            assert decl.tag is not None
            tagged[decl.tag] = (decl.name, sub, decl)
        else:
            plain.append((decl.name, sub, decl))
    return MessageStruct(plain, dict(sorted(tagged.items())), flexible, version)
