"""Declarative message descriptions, and the construct built from them per version.

A message is declared once, as a table of ``Field`` rows with Kafka's version ranges
("0+", "3-5", "none"). ``Message.struct(version)`` builds (and caches) the construct for
one version: which fields exist, which are nullable, whether strings/arrays are compact
and whether the struct ends in a tagged-field section. Decoded values are
``construct.Container`` objects (dicts with attribute access) keyed by snake_case names.
Unknown tagged fields are kept under ``UNKNOWN_TAGS`` and written back on encode.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any

from construct import Construct, Container, stream_read, stream_write

from protocol import types as t
from protocol.varint import encode_uvarint

if TYPE_CHECKING:
    from protocol.compiler import CompiledStruct

UNKNOWN_TAGS = "_unknown_tags"

_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; ``hi`` None means open-ended, ``lo`` > ``hi`` empty."""

    lo: int
    hi: int | None

    @classmethod
    def parse(cls, text: str) -> Versions:
        text = text.strip()
        if text == "none":
            return cls(1, 0)
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            lo, hi = text.split("-")
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, version: object) -> bool:
        if not isinstance(version, int):
            return False
        return self.lo <= version and (self.hi is None or version <= self.hi)

    def __str__(self) -> str:
        if self.hi is None:
            return f"{self.lo}+"
        if self.lo > self.hi:
            return "none"
        if self.lo == self.hi:
            return str(self.lo)
        return f"{self.lo}-{self.hi}"


class Primitive:
    """A named Kafka primitive type ("int32", "string", ...)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name.upper()


BOOL = Primitive("bool")
INT8 = Primitive("int8")
INT16 = Primitive("int16")
UINT16 = Primitive("uint16")
INT32 = Primitive("int32")
INT64 = Primitive("int64")
FLOAT64 = Primitive("float64")
STRING = Primitive("string")
BYTES = Primitive("bytes")
RECORDS = Primitive("records")
UUID = Primitive("uuid")

_FIXED: dict[str, Construct] = {
    "bool": t.BOOLEAN,
    "int8": t.INT8,
    "int16": t.INT16,
    "uint16": t.UINT16,
    "int32": t.INT32,
    "int64": t.INT64,
    "float64": t.FLOAT64,
    "uuid": t.UUID,
}

_ZERO_UUID = __import__("uuid").UUID(int=0)
_TYPE_DEFAULTS: dict[str, Any] = {
    "bool": False,
    "int8": 0,
    "int16": 0,
    "uint16": 0,
    "int32": 0,
    "int64": 0,
    "float64": 0.0,
    "string": "",
    "bytes": b"",
    "records": None,
    "uuid": _ZERO_UUID,
}


@dataclass(frozen=True)
class Struct:
    """A nested struct type: a name (Kafka's, for reference) and its fields."""

    name: str
    fields: tuple[Field, ...]


@dataclass(frozen=True)
class Array:
    """An array of a primitive or of a struct."""

    of: Primitive | Struct


FieldType = Primitive | Struct | Array


@dataclass(frozen=True)
class Field:
    """One row of a message declaration."""

    name: str
    type: FieldType
    versions: str
    nullable: str = "none"
    default: Any = _MISSING
    tag: int | None = None
    tagged: str = "none"
    flexible: str | None = None  # a per-field override, e.g. "none" for client_id
    ignorable: bool = False

    def present_in(self, version: int) -> bool:
        return version in Versions.parse(self.versions)

    def is_tagged_in(self, version: int) -> bool:
        return self.tag is not None and version in Versions.parse(self.tagged)

    def default_value(self, version: int) -> Any:
        """The value a reader assumes when the field is absent (fresh object each call)."""
        if self.default is not _MISSING:
            return list(self.default) if isinstance(self.default, list) else self.default
        if version in Versions.parse(self.nullable):
            return None
        if isinstance(self.type, Array):
            return []
        if isinstance(self.type, Struct):
            return default_struct(self.type.fields, version)
        return _TYPE_DEFAULTS[self.type.name]


def default_struct(fields: tuple[Field, ...], version: int) -> Container:
    return Container(
        (f.name, f.default_value(version)) for f in fields if f.present_in(version)
    )


@dataclass(frozen=True)
class Message:
    """A whole message: Kafka's name, API key, request/response, versions served."""

    name: str
    api_key: int | None
    kind: str  # "request", "response", "header" or "data"
    versions: str
    flexible: str
    fields: tuple[Field, ...]
    _cache: dict[int, Construct] = field(default_factory=dict, compare=False, repr=False)
    _compiled: dict[int, CompiledStruct] = field(default_factory=dict, compare=False, repr=False)

    @cached_property
    def min_version(self) -> int:
        return Versions.parse(self.versions).lo

    @cached_property
    def max_version(self) -> int:
        hi = Versions.parse(self.versions).hi
        assert hi is not None, "served versions are always bounded"
        return hi

    def is_flexible(self, version: int) -> bool:
        return version in Versions.parse(self.flexible)

    def struct(self, version: int) -> Construct:
        """The construct for one version (built once, then cached)."""
        built = self._cache.get(version)
        if built is None:
            if version not in Versions.parse(self.versions):
                raise ValueError(f"{self.name} has no version {version}")
            built = build_struct(self.fields, version, self.is_flexible(version))
            self._cache[version] = built
        return built

    def compiled(self, version: int) -> CompiledStruct:
        """The generated decoder/encoder for one version (see ``protocol.compiler``).

        Built from the same declarations as ``struct``, once, then cached; only versions
        the message declares are ever cached, so a hit also means the version is valid.
        """
        built = self._compiled.get(version)
        if built is None:
            if version not in Versions.parse(self.versions):
                raise ValueError(f"{self.name} has no version {version}")
            from protocol.compiler import compile_struct

            built = compile_struct(
                self.fields, version, self.is_flexible(version), label=f"{self.name} v{version}"
            )
            self._compiled[version] = built
        return built

    def default(self, version: int) -> Container:
        """A value of this message with every field at its default, for ``version``."""
        return default_struct(self.fields, version)


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
        count = t.parse_uvarint(stream, path)
        unknown: dict[int, bytes] = {}
        previous = -1
        for _ in range(count):
            tag = t.parse_uvarint(stream, path)
            size = t.parse_uvarint(stream, path)
            if tag <= previous:
                raise t.WireError(f"tagged fields out of order (tag {tag})", path=path)
            previous = tag
            raw = stream_read(stream, size, path)
            known = self.tagged.get(tag)
            if known is None:
                unknown[tag] = bytes(raw)
                continue
            inner = io.BytesIO(raw)
            obj[known[0]] = known[1]._parsereport(inner, context, path)
            if inner.tell() != size:
                raise t.WireError(f"tagged field {tag} has trailing bytes", path=path)
        if unknown:
            obj[UNKNOWN_TAGS] = unknown
        return obj

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        if not isinstance(obj, dict):
            raise t.WireError(f"struct expected, got {type(obj).__name__}", path=path)
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
                value == decl.default_value(self.version) and not _has_unknown_tags(value)
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


def _has_unknown_tags(value: Any) -> bool:
    """Whether a value holds unknown tagged fields anywhere (Container's ``==`` ignores them)."""
    if isinstance(value, dict):
        return bool(value.get(UNKNOWN_TAGS)) or any(_has_unknown_tags(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_unknown_tags(v) for v in value)
    return False


def _construct_for(decl: Field, type_: FieldType, version: int, flexible: bool) -> Construct:
    nullable = version in Versions.parse(decl.nullable)
    compact = flexible if decl.flexible is None else version in Versions.parse(decl.flexible)
    if isinstance(type_, Array):
        if isinstance(type_.of, Struct):
            element = build_struct(type_.of.fields, version, flexible)
        else:
            element = _construct_for(decl, type_.of, version, flexible)
            if isinstance(element, (t.KafkaString, t.KafkaBytes)):
                element = type(element)(nullable=False, compact=compact)
        return t.KafkaArray(element, nullable=nullable, compact=compact)
    if isinstance(type_, Struct):
        inner = build_struct(type_.fields, version, flexible)
        if nullable:
            return _NullableStruct(inner)
        return inner
    if type_.name == "string":
        return t.KafkaString(nullable=nullable, compact=compact)
    if type_.name in ("bytes", "records"):
        return t.KafkaBytes(nullable=nullable or type_.name == "records", compact=compact)
    return _FIXED[type_.name]


class _NullableStruct(Construct):
    """A nullable nested struct: an int8 marker (-1 null, 1 present), then the struct."""

    def __init__(self, inner: Construct) -> None:
        super().__init__()
        self.inner = inner

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        marker = t.INT8._parsereport(stream, context, path)
        if marker < 0:
            return None
        return self.inner._parsereport(stream, context, path)

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        if obj is None:
            t.INT8._build(-1, stream, context, path)
            return obj
        t.INT8._build(1, stream, context, path)
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
