"""Declarative message descriptions: what a message holds at each version.

A message is declared once, as a table of ``Field`` rows with Kafka's version ranges
("0+", "3-5", "none"): which fields exist, which are nullable, which are tagged, where
compactness is overridden. This module only describes; two layers read the same tables:
``protocol.builder`` makes the construct of one version (the reference codec) and
``protocol.compiler`` generates the fast codec of the same version.

Decoded values are ``construct.Container`` objects (dicts with attribute access) keyed by
snake_case names. Unknown tagged fields are kept under ``UNKNOWN_TAGS`` and written back
on encode.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from construct import Container

from protocol.api_keys import ApiKey

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

_ZERO_UUID = uuid.UUID(int=0)
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


@dataclass(frozen=True, eq=False)
class Message:
    """A whole message: Kafka's name, API key, request/response, versions served.

    Each message is declared once (``protocol.messages``), so a ``Message`` is equal only
    to itself; its identity keys the per-version caches of the builders above this
    module (``protocol.builder.struct_for``, ``protocol.compiler.compiled_for``).
    """

    name: str
    api_key: ApiKey | None
    kind: str  # "request", "response", "header" or "data"
    versions: str
    flexible: str
    fields: tuple[Field, ...]

    @cached_property
    def min_version(self) -> int:
        return Versions.parse(self.versions).lo

    @cached_property
    def max_version(self) -> int:
        hi = Versions.parse(self.versions).hi
        assert hi is not None, "served versions are always bounded"
        return hi

    def has_version(self, version: int) -> bool:
        return version in Versions.parse(self.versions)

    def is_flexible(self, version: int) -> bool:
        return version in Versions.parse(self.flexible)

    def default(self, version: int) -> Container:
        """A value of this message with every field at its default, for ``version``."""
        return default_struct(self.fields, version)


def has_unknown_tags(value: Any) -> bool:
    """Whether a value holds unknown tagged fields anywhere (Container's ``==`` ignores them)."""
    if isinstance(value, dict):
        return bool(value.get(UNKNOWN_TAGS)) or any(has_unknown_tags(v) for v in value.values())
    if isinstance(value, list):
        return any(has_unknown_tags(v) for v in value)
    return False
