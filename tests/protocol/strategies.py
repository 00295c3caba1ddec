"""Values for any declared message at any version: hypothesis strategies and seeded examples.

Both are derived from the ``Field`` tables alone, so a new message or version is covered
as soon as it is declared. A generated value holds exactly the fields present in that
version, so ``plain(decode(encode(value))) == plain(value)`` must hold:

* nullable fields (and only those) may be ``None``;
* tagged fields are always present as keys, holding either their default (which the
  encoder omits and the decoder restores) or some other value;
* flexible structs may carry unknown tagged fields under ``UNKNOWN_TAGS`` (only when
  there is at least one, as the decoder only adds the key then), with tag numbers
  above every known tag of that struct.

``plain`` turns decoded ``construct.Container`` values into plain dicts: Container's own
``==`` skips keys starting with ``_``, which would hide lost unknown tags.
"""

from __future__ import annotations

import random
import string
import uuid
from typing import Any

from hypothesis import strategies as st

from protocol.schema import UNKNOWN_TAGS, Array, Field, FieldType, Message, Primitive, Struct, Versions

INT_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}

MAX_ARRAY = 3  # top-level arrays; nested ones hold at most MAX_NESTED_ARRAY elements
MAX_NESTED_ARRAY = 2
MAX_TEXT = 8
MAX_BYTES = 16
ZERO_UUID = uuid.UUID(int=0)


def is_nullable(decl: Field, version: int) -> bool:
    return version in Versions.parse(decl.nullable)


def is_tagged(decl: Field, version: int, flexible: bool) -> bool:
    """Whether ``decl`` sits in the tagged-field section (only flexible structs have one)."""
    return flexible and decl.is_tagged_in(version)


def known_tags(fields: tuple[Field, ...], version: int, flexible: bool) -> set[int]:
    return {
        f.tag
        for f in fields
        if f.present_in(version) and is_tagged(f, version, flexible) and f.tag is not None
    }


def plain(value: Any) -> Any:
    """Deep copy as plain dicts/lists (Container's ``==`` ignores ``_``-prefixed keys)."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


# --------------------------------------------------------------------------- hypothesis


def _primitive(kind: str) -> st.SearchStrategy[Any]:
    if kind in INT_RANGES:
        lo, hi = INT_RANGES[kind]
        return st.integers(lo, hi)
    if kind == "bool":
        return st.booleans()
    if kind == "float64":
        return st.floats(allow_nan=False)
    if kind == "string":
        return st.text(max_size=MAX_TEXT)
    if kind in ("bytes", "records"):
        return st.binary(max_size=MAX_BYTES)
    if kind == "uuid":
        return st.one_of(st.just(ZERO_UUID), st.uuids())
    raise AssertionError(f"no strategy for primitive {kind}")


def _type_strategy(
    type_: FieldType, version: int, flexible: bool, unknown: bool, depth: int
) -> st.SearchStrategy[Any]:
    if isinstance(type_, Array):
        # Array elements are never null, whatever the field's nullableVersions say.
        element = _type_strategy(type_.of, version, flexible, unknown, depth + 1)
        return st.lists(element, max_size=MAX_ARRAY if depth == 0 else MAX_NESTED_ARRAY)
    if isinstance(type_, Struct):
        return struct_strategy(type_.fields, version, flexible, unknown, depth + 1)
    assert isinstance(type_, Primitive)
    return _primitive(type_.name)


def field_strategy(
    decl: Field, version: int, flexible: bool, unknown: bool = True, depth: int = 0
) -> st.SearchStrategy[Any]:
    """Values for one field at one version (tagged: its default or anything else)."""
    inner = _type_strategy(decl.type, version, flexible, unknown, depth)
    # RECORDS is always written as nullable bytes.
    if is_nullable(decl, version) or (isinstance(decl.type, Primitive) and decl.type.name == "records"):
        inner = st.one_of(st.none(), inner)
    if is_tagged(decl, version, flexible):
        default = decl.default_value(version)
        choices = [st.just(default), inner]
        if unknown and isinstance(decl.type, Struct):
            # The default struct plus unknown tags must still be written (not skipped as default).
            extra = unknown_tags_strategy(known_tags(decl.type.fields, version, flexible))
            choices.insert(1, extra.map(lambda tags: {**default, UNKNOWN_TAGS: tags}))
        inner = st.one_of(*choices)
    return inner


def unknown_tags_strategy(known: set[int]) -> st.SearchStrategy[dict[int, bytes]]:
    """One or two tags above every known one, each with a few raw bytes."""
    first = max(known, default=-1) + 1
    tags = st.one_of(st.integers(first, first + 40), st.integers(first, 2**31))
    return st.dictionaries(tags, st.binary(max_size=8), min_size=1, max_size=2)


def struct_strategy(
    fields: tuple[Field, ...], version: int, flexible: bool, unknown: bool = True, depth: int = 0
) -> st.SearchStrategy[dict[str, Any]]:
    required = {
        decl.name: field_strategy(decl, version, flexible, unknown, depth)
        for decl in fields
        if decl.present_in(version)
    }
    optional: dict[str, st.SearchStrategy[Any]] = {}
    if flexible and unknown:
        optional[UNKNOWN_TAGS] = unknown_tags_strategy(known_tags(fields, version, flexible))
    return st.fixed_dictionaries(required, optional=optional)


def value_for(
    message: Message, version: int, *, unknown_tags: bool = True
) -> st.SearchStrategy[dict[str, Any]]:
    """A strategy of bodies of ``message`` at ``version`` (unknown tags only if flexible)."""
    if version not in Versions.parse(message.versions):
        raise ValueError(f"{message.name} does not declare version {version}")
    return struct_strategy(message.fields, version, message.is_flexible(version), unknown_tags)


# --------------------------------------------------------------------------- seeded


class _Seeded:
    """The same shape of values as ``value_for``, drawn from a seeded ``random.Random``."""

    def __init__(self, seed: int, unknown: bool) -> None:
        self.rng = random.Random(seed)
        self.unknown = unknown

    def primitive(self, kind: str) -> Any:
        rng = self.rng
        if kind in INT_RANGES:
            lo, hi = INT_RANGES[kind]
            return rng.choice([lo, hi, 0, -1 if lo < 0 else 1, rng.randint(lo, hi)])
        if kind == "bool":
            return rng.random() < 0.5
        if kind == "float64":
            return rng.uniform(-1e6, 1e6)
        if kind == "string":
            alphabet = string.ascii_letters + string.digits + "-._é☃"
            return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, MAX_TEXT)))
        if kind in ("bytes", "records"):
            return rng.randbytes(rng.randint(0, MAX_BYTES))
        if kind == "uuid":
            return uuid.UUID(int=rng.getrandbits(128))
        raise AssertionError(f"no example for primitive {kind}")

    def of_type(self, type_: FieldType, version: int, flexible: bool) -> Any:
        if isinstance(type_, Array):
            return [self.of_type(type_.of, version, flexible) for _ in range(self.rng.randint(0, MAX_ARRAY))]
        if isinstance(type_, Struct):
            return self.struct(type_.fields, version, flexible)
        assert isinstance(type_, Primitive)
        return self.primitive(type_.name)

    def field(self, decl: Field, version: int, flexible: bool) -> Any:
        rng = self.rng
        if is_tagged(decl, version, flexible) and rng.random() < 0.3:
            return decl.default_value(version)
        nullable = is_nullable(decl, version) or (
            isinstance(decl.type, Primitive) and decl.type.name == "records"
        )
        if nullable and rng.random() < 0.25:
            return None
        return self.of_type(decl.type, version, flexible)

    def struct(self, fields: tuple[Field, ...], version: int, flexible: bool) -> dict[str, Any]:
        out = {d.name: self.field(d, version, flexible) for d in fields if d.present_in(version)}
        if flexible and self.unknown and self.rng.random() < 0.3:
            first = max(known_tags(fields, version, flexible), default=-1) + 1
            tag = first + self.rng.randint(0, 20)
            out[UNKNOWN_TAGS] = {tag: self.rng.randbytes(self.rng.randint(0, 6))}
        return out


def example_for(
    message: Message, version: int, seed: int = 0, *, unknown_tags: bool = True
) -> dict[str, Any]:
    """A deterministic value of ``message`` at ``version``: same seed, same value."""
    if version not in Versions.parse(message.versions):
        raise ValueError(f"{message.name} does not declare version {version}")
    return _Seeded(seed, unknown_tags).struct(message.fields, version, message.is_flexible(version))


def versions_of(message: Message) -> range:
    return range(message.min_version, message.max_version + 1)
