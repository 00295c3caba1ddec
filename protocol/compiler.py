"""Compile field tables into fast Python decoders and encoders.

``protocol.schema`` declares every message once, as a table of ``Field`` rows, and
``protocol.builder`` turns one version of a table into a construct. That construct is
exact but slow: a Python call per primitive, a ``BytesIO`` per message, a context per
struct. ``compile_struct`` takes the very same inputs (field table, version, flexible
flag), writes the Python source of a decoder and an encoder specialised to that one
layout and runs it through ``exec`` once; ``compiled_for`` caches the result per message
and version. This is much as construct's own ``compile()`` does, but from our building
blocks:

* a run of consecutive fixed-width fields (bool, ints, float64, uuid), together with the
  int8/int16/int32 prefix of the variable-size field ending the run (a string or bytes
  length, an array count, a nullable struct's marker), is read with ONE precompiled
  ``struct.Struct.unpack_from`` and written with one ``pack``;
* strings, bytes and arrays follow the field's nullability and compactness at that
  version; compact lengths are unsigned varints read inline (one byte in the common case);
* nested structs (array elements, plain and nullable struct fields) are generated
  inline, in the loop or branch that reads or writes them, so an element costs no
  function call; arrays of fixed-width numbers are read with one ``unpack_from``;
* the tagged-field section of flexible structs decodes known tags by name (absent ones
  take the field's default) and keeps unknown ones, raw, under ``UNKNOWN_TAGS``; the
  common empty section costs one byte test.

The construct stays the reference, and the generated code follows its rules exactly:
same values (``construct.Container`` objects, same keys in the same order), the same
bytes on encode (missing fields take their default, extra keys are ignored, tagged
fields equal to their default are left out unless they hold unknown tags), and the same
accept/refuse decisions (varint lengths, negative lengths, nulls where not nullable,
invalid UTF-8, tag order, trailing bytes inside a tagged field). Malformed input only
ever raises ``protocol.errors.ProtocolError``; an array count that cannot fit in the
bytes left is refused before any element is read.

Besides the ``Container`` shape, a top-level struct can be compiled as a *projection*:
the decoder returns ``factory(*values)`` (or a tuple) for a chosen list of field names,
which skips building a ``Container`` where the caller immediately unpacks it (the
``__consumer_offsets`` keys and values, the request header's client id).
"""

from __future__ import annotations

import functools
import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from construct import Container

from protocol.errors import ProtocolError
from protocol.schema import UNKNOWN_TAGS, Array, Field, FieldType, Message, Struct, Versions, has_unknown_tags
from protocol.varint import VarintError, decode_uvarint, encode_uvarint, uvarint_tail

__all__ = ["RAW_ERRORS", "CompiledStruct", "compile_struct", "compiled_for", "malformed"]

Decoder = Callable[[Any, int], tuple[Any, int]]
Encoder = Callable[[Any, bytearray], None]

# Exceptions the generated code may hit on hostile input (short buffers, bad UTF-8,
# unpackable values...). The entry points turn every one of them into ProtocolError.
_CONVERTED: tuple[type[BaseException], ...] = (
    struct.error,
    ValueError,
    TypeError,
    IndexError,
    KeyError,
    AttributeError,
    OverflowError,
)

#: What a generated decoder or encoder raises on bad input (``CompiledStruct.raw`` included).
RAW_ERRORS: tuple[type[BaseException], ...] = (ProtocolError, VarintError, *_CONVERTED)


def _described(doing: str, label: str, exc: BaseException) -> ProtocolError:
    if isinstance(exc, (ProtocolError, VarintError)):
        return ProtocolError(doing + label + ": " + str(exc))
    return ProtocolError(doing + label + ": " + type(exc).__name__ + ": " + str(exc))


def malformed(label: str, exc: BaseException) -> ProtocolError:
    """The ``ProtocolError`` for ``exc`` (one of ``RAW_ERRORS``) met decoding ``label``:
    what a guarded ``decode`` raises, and what callers of ``raw`` raise."""
    return _described("malformed ", label, exc)


def _unencodable(label: str, exc: BaseException) -> ProtocolError:
    return _described("cannot encode ", label, exc)


_FIXED_FORMATS = {
    "bool": "?",
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "int64": "q",
    "float64": "d",
    "uuid": "16s",
}
_IMMUTABLE = (type(None), bool, int, float, str, bytes, uuid.UUID)
_MISSING: Any = object()


# --------------------------------------------------------------------------- IR
#
# A version-specific description of a layout, built from the declarations with exactly
# the rules of ``builder._construct_for`` / ``builder.build_struct``.


@dataclass(frozen=True, slots=True, eq=False)
class _FixedT:
    kind: str
    fmt: str
    size: int


@dataclass(frozen=True, slots=True, eq=False)
class _StrT:
    nullable: bool
    compact: bool


@dataclass(frozen=True, slots=True, eq=False)
class _BytesT:
    nullable: bool
    compact: bool


@dataclass(frozen=True, slots=True, eq=False)
class _ArrayT:
    element: _Node
    nullable: bool
    compact: bool


@dataclass(frozen=True, slots=True, eq=False)
class _Member:
    name: str
    node: _Node
    decl: Field
    default: Any  # decl.default_value(version), compared and written by the encoder
    tag: int | None = None


@dataclass(frozen=True, slots=True, eq=False)
class _StructT:
    plain: tuple[_Member, ...]
    tagged: tuple[_Member, ...]  # in tag order
    flexible: bool
    version: int


@dataclass(frozen=True, slots=True, eq=False)
class _NullableT:
    inner: _StructT


_Node: TypeAlias = _FixedT | _StrT | _BytesT | _ArrayT | _StructT | _NullableT


def _node_for(decl: Field, type_: FieldType, version: int, flexible: bool) -> _Node:
    """Mirror of ``builder._construct_for``."""
    nullable = version in Versions.parse(decl.nullable)
    compact = flexible if decl.flexible is None else version in Versions.parse(decl.flexible)
    if isinstance(type_, Array):
        element: _Node
        if isinstance(type_.of, Struct):
            element = _struct_ir(type_.of.fields, version, flexible)
        else:
            element = _node_for(decl, type_.of, version, flexible)
            if isinstance(element, _StrT):
                element = _StrT(nullable=False, compact=compact)
            elif isinstance(element, _BytesT):
                element = _BytesT(nullable=False, compact=compact)
        return _ArrayT(element, nullable, compact)
    if isinstance(type_, Struct):
        inner = _struct_ir(type_.fields, version, flexible)
        return _NullableT(inner) if nullable else inner
    if type_.name == "string":
        return _StrT(nullable, compact)
    if type_.name in ("bytes", "records"):
        return _BytesT(nullable or type_.name == "records", compact)
    fmt = _FIXED_FORMATS[type_.name]
    return _FixedT(type_.name, fmt, struct.calcsize(">" + fmt))


@functools.cache
def _struct_ir(fields: tuple[Field, ...], version: int, flexible: bool) -> _StructT:
    """Mirror of ``builder.build_struct`` (cached the same way, so shared structs share code)."""
    plain: list[_Member] = []
    tagged: list[_Member] = []
    for decl in fields:
        if not decl.present_in(version):
            continue
        node = _node_for(decl, decl.type, version, flexible)
        default = decl.default_value(version)
        if flexible and decl.is_tagged_in(version):
            tagged.append(_Member(decl.name, node, decl, default, decl.tag))
        else:
            plain.append(_Member(decl.name, node, decl, default))
    tagged.sort(key=lambda m: m.tag or 0)
    return _StructT(tuple(plain), tuple(tagged), flexible, version)


def _prefix_format(node: _Node) -> str | None:
    """The fixed-width prefix a node starts with, which can join the preceding run."""
    if isinstance(node, _StrT):
        return None if node.compact else "h"
    if isinstance(node, (_BytesT, _ArrayT)):
        return None if node.compact else "i"
    if isinstance(node, _NullableT):
        return "b"
    return None


def _min_size(node: _Node) -> int:
    """Fewest bytes any encoding of ``node`` takes (so a count can be checked up front)."""
    if isinstance(node, _FixedT):
        return node.size
    if isinstance(node, (_StrT, _BytesT, _ArrayT)):
        prefix = _prefix_format(node)
        return 1 if prefix is None else struct.calcsize(">" + prefix)
    if isinstance(node, _NullableT):
        return 1
    return sum(_min_size(m.node) for m in node.plain) + (1 if node.flexible else 0)


# --------------------------------------------------------------------------- runtime
#
# Small helpers the generated code calls on its slow paths.


def _read_tags(buf: bytes, pos: int, obj: dict[str, Any], table: dict[int, tuple[str, Decoder]]) -> int:
    """A non-empty tagged-field section, exactly as ``builder.MessageStruct._parse`` reads it."""
    error = ProtocolError
    count, pos = decode_uvarint(buf, pos)
    end = len(buf)
    if count > end - pos:  # every entry takes at least two bytes
        raise error(f"tagged-field count {count} exceeds the {end - pos} bytes left")
    unknown: dict[int, bytes] = {}
    previous = -1
    for _ in range(count):
        tag, pos = decode_uvarint(buf, pos)
        size, pos = decode_uvarint(buf, pos)
        if tag <= previous:
            raise error(f"tagged fields out of order (tag {tag})")
        previous = tag
        stop = pos + size
        if stop > end:
            raise error(f"tagged field {tag} needs {size} bytes, {end - pos} left")
        raw = buf[pos:stop]
        pos = stop
        known = table.get(tag)
        if known is None:
            unknown[tag] = raw
            continue
        value, used = known[1](raw, 0)
        if used != size:
            raise error(f"tagged field {tag} has trailing bytes")
        obj[known[0]] = value
    if unknown:
        obj[UNKNOWN_TAGS] = unknown
    return pos


def _tag_section(known: list[tuple[int, bytearray]], unknown: Any, declared: frozenset[int]) -> bytes:
    """The tagged-field section, exactly as ``builder.MessageStruct._build`` writes it."""
    out: list[tuple[int, Any]] = list(known)
    if unknown:
        out.extend((tag, bytes(raw)) for tag, raw in unknown.items() if tag not in declared)
    out.sort()
    section = bytearray(encode_uvarint(len(out)))
    for tag, raw in out:
        section += encode_uvarint(tag)
        section += encode_uvarint(len(raw))
        section += raw
    return bytes(section)


def _as_bytes(value: Any) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise ProtocolError(f"bytes expected, got {type(value).__name__}")
    data = bytes(value)
    if len(data) != len(value):
        raise ProtocolError(f"bytes-like value of {len(value)} items holds {len(data)} bytes")
    return data


def _uuid_bytes(value: Any) -> bytes:
    if not isinstance(value, uuid.UUID):
        raise ProtocolError(f"uuid expected, got {value!r}")
    return value.bytes


def _runtime() -> dict[str, Any]:
    return {
        "__builtins__": __builtins__,
        "_C": Container,
        "_PE": ProtocolError,
        "_RAW": RAW_ERRORS,
        "_malformed": malformed,
        "_unencodable": _unencodable,
        "_UUID": uuid.UUID,
        "_uvt": uvarint_tail,
        "_uve": encode_uvarint,
        "_tags": _read_tags,
        "_tsec": _tag_section,
        "_tob": _as_bytes,
        "_ub": _uuid_bytes,
        "_hut": has_unknown_tags,
        "_su": struct.unpack_from,
        "_sp": struct.pack,
        "_M": _MISSING,
        "_UT": UNKNOWN_TAGS,
    }


# --------------------------------------------------------------------------- generator


class _Gen:
    """Writes the source of one compiled layout; every name it uses lives in ``ns``.

    Nested structs (array elements, struct fields) are generated inline, in the loop or
    branch that reads them, so an element costs no function call; only the decoders of
    tagged fields (looked up by tag at run time) and their writers are functions.
    """

    def __init__(self) -> None:
        self.ns: dict[str, Any] = _runtime()
        self.functions: list[list[str]] = []
        self.counter = 0
        self.structs: dict[str, str] = {}
        self.tables: list[tuple[str, list[tuple[int, str, str]]]] = []
        self.uses_end = False

    # -- names and constants

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def const(self, value: Any) -> str:
        if isinstance(value, bool) or value is None:
            return repr(value)
        if type(value) is int and -(2**63) <= value < 2**63:
            return repr(value)
        name = self.fresh("_k")
        self.ns[name] = value
        return name

    def fresh_default(self, member: _Member, version: int) -> str:
        """An expression giving a new default value each time (as ``default_value``)."""
        value = member.default
        if isinstance(value, _IMMUTABLE):
            return self.const(value)
        if isinstance(value, list) and not value:
            return "[]"
        name = self.fresh("_f")
        self.ns[name] = functools.partial(member.decl.default_value, version)
        return f"{name}()"

    def packer(self, fmt: str) -> str:
        name = self.structs.get(fmt)
        if name is None:
            name = self.fresh("_s")
            self.structs[fmt] = name
            packer = struct.Struct(">" + fmt)
            self.ns[name] = packer
            self.ns[name + "u"] = packer.unpack_from
            self.ns[name + "p"] = packer.pack
        return name

    def function(self, name: str, args: str, body: list[str], decoder: bool) -> str:
        """Add a function; decoders that check lengths get ``end = len(buf)`` first."""
        if decoder and self.uses_end:
            body = ["end = len(buf)", *body]
        self.functions.append([f"def {name}({args}):"] + ["    " + line for line in body])
        return name

    # -- decoding

    def read_length(self, node: _Node, var: str, ind: str) -> list[str]:
        """Read the length/count/marker prefix of ``node`` into local ``var``."""
        prefix = _prefix_format(node)
        if prefix is None:  # compact: unsigned varint, stored plus one
            return [
                f"{ind}{var} = buf[pos]",
                f"{ind}pos += 1",
                f"{ind}if {var} > 127:",
                f"{ind}    {var}, pos = _uvt(buf, pos, {var})",
                f"{ind}{var} -= 1",
            ]
        size = struct.calcsize(">" + prefix)
        return [f"{ind}{var}, = {self.packer(prefix)}u(buf, pos)", f"{ind}pos += {size}"]

    def decode_node(self, node: _Node, target: str, ind: str, prefix_var: str | None = None) -> list[str]:
        """Lines decoding ``node`` at ``pos`` into ``target`` (advancing ``pos``)."""
        if isinstance(node, _FixedT):
            packer = self.packer(node.fmt)
            if node.kind == "uuid":
                tmp = self.fresh("u")
                return [
                    f"{ind}{tmp}, = {packer}u(buf, pos)",
                    f"{ind}{target} = _UUID(bytes={tmp})",
                    f"{ind}pos += 16",
                ]
            return [f"{ind}{target}, = {packer}u(buf, pos)", f"{ind}pos += {node.size}"]
        if isinstance(node, _StructT):
            return self.decode_struct(node, target, ind)
        lines: list[str] = []
        n = prefix_var
        if n is None:
            n = self.fresh("n")
            lines += self.read_length(node, n, ind)
        if isinstance(node, _NullableT):
            return lines + [
                f"{ind}if {n} < 0:",
                f"{ind}    {target} = None",
                f"{ind}else:",
                *self.decode_struct(node.inner, target, ind + "    "),
            ]
        what = "string" if isinstance(node, _StrT) else "bytes" if isinstance(node, _BytesT) else "array"
        lines.append(f"{ind}if {n} < 0:")
        if node.nullable:
            lines += [
                f"{ind}    if {n} != -1:",
                f'{ind}        raise _PE(f"invalid {what} length {{{n}}}")',
                f"{ind}    {target} = None",
            ]
        else:
            lines.append(f'{ind}    raise _PE(f"invalid {what} length {{{n}}}")')
        lines.append(f"{ind}else:")
        inner = ind + "    "
        self.uses_end = True
        if isinstance(node, (_StrT, _BytesT)):
            read = "buf[pos:e].decode()" if isinstance(node, _StrT) else "buf[pos:e]"
            return lines + [
                f"{inner}e = pos + {n}",
                f"{inner}if e > end:",
                f'{inner}    raise _PE(f"{what} of {{{n}}} bytes but {{end - pos}} left")',
                f"{inner}{target} = {read}",
                f"{inner}pos = e",
            ]
        assert isinstance(node, _ArrayT)
        element = node.element
        size = _min_size(element)
        if size:
            bound = n if size == 1 else f"{n} * {size}"
            lines += [
                f"{inner}if {bound} > end - pos:",
                f'{inner}    raise _PE(f"array of {{{n}}} elements cannot fit in {{end - pos}} bytes")',
            ]
        if isinstance(element, _FixedT) and element.kind != "uuid":
            step = n if element.size == 1 else f"{n} * {element.size}"
            return lines + [
                f'{inner}{target} = list(_su(">%d{element.fmt}" % {n}, buf, pos))',
                f"{inner}pos += {step}",
            ]
        items = self.fresh("a")
        append = self.fresh("ap")
        value = self.fresh("v")
        return lines + [
            f"{inner}{items} = []",
            f"{inner}{append} = {items}.append",
            f"{inner}for _ in range({n}):",
            *self.decode_node(element, value, inner + "    "),
            f"{inner}    {append}({value})",
            f"{inner}{target} = {items}",
        ]

    def decode_struct(self, st: _StructT, target: str, ind: str) -> list[str]:
        """Lines building the Container of ``st`` into ``target``."""
        obj = target if target.isidentifier() else self.fresh("o")
        lines = [f"{ind}{obj} = _C()"]
        lines += self.decode_members(st.plain, [f"{obj}[{m.name!r}]" for m in st.plain], ind)
        if st.flexible:
            lines += [f"{ind}{obj}[{m.name!r}] = {self.fresh_default(m, st.version)}" for m in st.tagged]
            lines += self.decode_tags(st, obj, ind)
        if obj != target:
            lines.append(f"{ind}{target} = {obj}")
        return lines

    def decode_members(self, members: Sequence[_Member], targets: Sequence[str], ind: str) -> list[str]:
        """Plain fields in order, fusing fixed runs (and the next prefix) into one unpack."""
        lines: list[str] = []
        run_fmt = ""
        run_targets: list[str] = []
        run_uuids: list[str] = []

        def flush() -> None:
            nonlocal run_fmt, run_targets, run_uuids
            if not run_fmt:
                return
            packer = self.packer(run_fmt)
            if not run_uuids:
                lines.append(f"{ind}{', '.join(run_targets)}, = {packer}u(buf, pos)")
            else:  # through temporaries, so keys are still inserted in field order
                temps = [self.fresh("r") for _ in run_targets]
                lines.append(f"{ind}{', '.join(temps)}, = {packer}u(buf, pos)")
                for target, tmp in zip(run_targets, temps, strict=True):
                    value = f"_UUID(bytes={tmp})" if target in run_uuids else tmp
                    lines.append(f"{ind}{target} = {value}")
            lines.append(f"{ind}pos += {struct.calcsize('>' + run_fmt)}")
            run_fmt, run_targets, run_uuids = "", [], []

        for member, target in zip(members, targets, strict=True):
            node = member.node
            if isinstance(node, _FixedT):
                run_fmt += node.fmt
                run_targets.append(target)
                if node.kind == "uuid":
                    run_uuids.append(target)
                continue
            prefix = _prefix_format(node)
            if prefix is not None:
                n = self.fresh("n")
                run_fmt += prefix
                run_targets.append(n)
                flush()
                lines += self.decode_node(node, target, ind, n)
            else:
                flush()
                lines += self.decode_node(node, target, ind)
        flush()
        return lines

    def decode_tags(self, st: _StructT, obj: str, ind: str) -> list[str]:
        table = self.fresh("_T")
        entries: list[tuple[int, str, str]] = []
        for member in st.tagged:
            assert member.tag is not None
            entries.append((member.tag, member.name, self.field_decoder(member.node)))
        self.tables.append((table, entries))
        return [
            f"{ind}if buf[pos]:",
            f"{ind}    pos = _tags(buf, pos, {obj}, {table})",
            f"{ind}else:",
            f"{ind}    pos += 1",
        ]

    def field_decoder(self, node: _Node) -> str:
        """A standalone decoder of one value (a tagged field's, read from its own bytes)."""
        saved, self.uses_end = self.uses_end, False
        body = [*self.decode_node(node, "v", ""), "return v, pos"]
        name = self.function(self.fresh("_t"), "buf, pos", body, decoder=True)
        self.uses_end = saved
        return name

    def projection_decoder(
        self, st: _StructT, names: Sequence[str], missing: dict[str, Any], factory: Any
    ) -> str:
        """A top-level decoder returning ``factory(*values of names)`` instead of a Container."""
        saved, self.uses_end = self.uses_end, False
        local = {m.name: f"f{i}" for i, m in enumerate(st.plain)}
        body = self.decode_members(st.plain, [local[m.name] for m in st.plain], "")
        if st.flexible:
            inits = ", ".join(f"{m.name!r}: {self.fresh_default(m, st.version)}" for m in st.tagged)
            body.append(f"t = {{{inits}}}")
            body += self.decode_tags(st, "t", "")
            for m in st.tagged:
                local[m.name] = f"t[{m.name!r}]"
        args: list[str] = []
        for wanted in names:
            if wanted in local:
                args.append(local[wanted])
            elif wanted in missing:
                args.append(self.const(missing[wanted]))
            else:
                raise ValueError(f"field {wanted!r} is not in this version and has no stand-in")
        joined = ", ".join(args)
        if factory is None:
            body.append(f"return ({joined}{',' if len(args) == 1 else ''}), pos")
        else:
            body.append(f"return {self.const(factory)}({joined}), pos")
        name = self.function(self.fresh("_p"), "buf, pos", body, decoder=True)
        self.uses_end = saved
        return name

    def struct_decoder(self, st: _StructT) -> str:
        saved, self.uses_end = self.uses_end, False
        body = [*self.decode_struct(st, "o", ""), "return o, pos"]
        name = self.function(self.fresh("_d"), "buf, pos", body, decoder=True)
        self.uses_end = saved
        return name

    # -- encoding

    def prepare(self, node: _Node, x: str, p: str, ind: str) -> list[str]:
        """For a node with a length/count/marker: check ``x``, leave that prefix value in
        ``p`` and what follows it (encoded string, bytes, the array itself) in ``x``."""
        if isinstance(node, _NullableT):
            return [f"{ind}{p} = -1 if {x} is None else 1"]
        assert isinstance(node, (_StrT, _BytesT, _ArrayT))
        what = "string" if isinstance(node, _StrT) else "bytes" if isinstance(node, _BytesT) else "array"
        lines = [f"{ind}if {x} is None:"]
        if node.nullable:
            lines.append(f"{ind}    {p} = -1")
        else:
            lines.append(f'{ind}    raise _PE("null given for a non-nullable {what}")')
        if isinstance(node, _StrT):
            lines += [
                f"{ind}elif isinstance({x}, str):",
                f"{ind}    {x} = {x}.encode()",
                f"{ind}    {p} = len({x})",
            ]
            if not node.compact:
                lines += [
                    f"{ind}    if {p} > 32767:",
                    f'{ind}        raise _PE(f"string of {{{p}}} bytes is longer than int16 allows")',
                ]
            lines += [f"{ind}else:", f'{ind}    raise _PE(f"string expected, got {{{x}!r}}")']
        elif isinstance(node, _BytesT):
            lines += [
                f"{ind}else:",
                f"{ind}    if type({x}) is not bytes:",
                f"{ind}        {x} = _tob({x})",
                f"{ind}    {p} = len({x})",
            ]
        else:
            lines += [
                f"{ind}elif isinstance({x}, (str, bytes, dict)):",
                f'{ind}    raise _PE(f"array expected, got {{type({x}).__name__}}")',
                f"{ind}else:",
                f"{ind}    {p} = len({x})",
            ]
        return lines

    def payload(self, node: _Node, x: str, p: str, ind: str) -> list[str]:
        """Write what follows the prefix (see ``prepare``)."""
        if isinstance(node, _NullableT):
            return [f"{ind}if {x} is not None:", *self.encode_struct(node.inner, x, ind + "    ")]
        if isinstance(node, (_StrT, _BytesT)):
            return [f"{ind}if {p} > 0:", f"{ind}    out += {x}"]
        assert isinstance(node, _ArrayT)
        element = node.element
        inner = ind + "    "
        if isinstance(element, _FixedT) and element.kind != "uuid":
            return [f"{ind}if {p} > 0:", f'{inner}out += _sp(">%d{element.fmt}" % {p}, *{x})']
        item = self.fresh("it")
        return [
            f"{ind}if {p} > 0:",
            f"{inner}for {item} in {x}:",
            *self.encode_node(element, item, inner + "    "),
        ]

    def encode_node(self, node: _Node, x: str, ind: str) -> list[str]:
        """Lines writing the value in local ``x`` to ``out``."""
        if isinstance(node, _FixedT):
            if node.kind == "uuid":
                return [f"{ind}out += _ub({x})"]
            return [f"{ind}out += {self.packer(node.fmt)}p({x})"]
        if isinstance(node, _StructT):
            return self.encode_struct(node, x, ind)
        p = self.fresh("p")
        lines = self.prepare(node, x, p, ind)
        prefix = _prefix_format(node)
        if prefix is not None:
            lines.append(f"{ind}out += {self.packer(prefix)}p({p})")
        else:
            lines += [
                f"{ind}if {p} < 127:",
                f"{ind}    out.append({p} + 1)",
                f"{ind}else:",
                f"{ind}    out += _uve({p} + 1)",
            ]
        return lines + self.payload(node, x, p, ind)

    def encode_struct(self, st: _StructT, v: str, ind: str) -> list[str]:
        """Lines writing the dict in local ``v`` as ``st`` (MessageStruct._build's rules)."""
        g = self.fresh("g")
        lines = [
            f"{ind}if not isinstance({v}, dict):",
            f'{ind}    raise _PE(f"struct expected, got {{type({v}).__name__}}")',
            f"{ind}{g} = {v}.get",
        ]
        lines += self.encode_members(st.plain, g, ind)
        if st.flexible:
            lines += self.encode_tags(st, g, ind)
        return lines

    def encode_members(self, members: Sequence[_Member], g: str, ind: str) -> list[str]:
        lines: list[str] = []
        run_fmt = ""
        run_args: list[str] = []

        def flush() -> None:
            nonlocal run_fmt, run_args
            if run_fmt:
                lines.append(f"{ind}out += {self.packer(run_fmt)}p({', '.join(run_args)})")
            run_fmt, run_args = "", []

        for member in members:
            node = member.node
            fetch = f"{g}({member.name!r}, {self.const(member.default)})"
            if isinstance(node, _FixedT):
                run_fmt += node.fmt
                run_args.append(f"_ub({fetch})" if node.kind == "uuid" else fetch)
                continue
            x = self.fresh("x")
            prefix = _prefix_format(node)
            lines.append(f"{ind}{x} = {fetch}")
            if prefix is not None:
                p = self.fresh("p")
                lines += self.prepare(node, x, p, ind)
                run_fmt += prefix
                run_args.append(p)
                flush()
                lines += self.payload(node, x, p, ind)
            else:
                flush()
                lines += self.encode_node(node, x, ind)
        flush()
        return lines

    def encode_tags(self, st: _StructT, g: str, ind: str) -> list[str]:
        lines: list[str] = []
        tg = self.fresh("tg")
        if st.tagged:
            lines.append(f"{ind}{tg} = []")
        for member in st.tagged:
            x = self.fresh("x")
            default = self.const(member.default)
            writer = self.function(self.fresh("_w"), "v, out", self.encode_node(member.node, "v", ""), False)
            lines += [
                f"{ind}{x} = {g}({member.name!r}, _M)",
                f"{ind}if {x} is not _M and (not ({x} == {default}) or _hut({x})):",
                f"{ind}    b = bytearray()",
                f"{ind}    {writer}({x}, b)",
                f"{ind}    {tg}.append(({member.tag}, b))",
            ]
        declared = self.const(frozenset(m.tag for m in st.tagged))
        u = self.fresh("u")
        lines += [
            f"{ind}{u} = {g}(_UT)",
            f"{ind}if {u} or {tg}:" if st.tagged else f"{ind}if {u}:",
            f"{ind}    out += _tsec({tg if st.tagged else '[]'}, {u}, {declared})",
            f"{ind}else:",
            f"{ind}    out.append(0)",
        ]
        return lines

    def struct_encoder(self, st: _StructT) -> str:
        return self.function(self.fresh("_e"), "v, out", self.encode_struct(st, "v", ""), False)

    # -- assembly

    def source(self) -> str:
        return "\n\n".join("\n".join(function) for function in self.functions) + "\n"


@dataclass(frozen=True, slots=True, eq=False)
class CompiledStruct:
    """The generated codec of one layout.

    ``decode(buf, pos)`` returns ``(value, position after it)``; ``encode(value, out)``
    appends to ``out``. Both raise only ``ProtocolError`` on bad input.
    """

    label: str
    flexible: bool
    names: tuple[str, ...]
    decode: Decoder
    encode: Encoder
    source: str
    #: ``decode`` without its guard: takes bytes only, and raises what the generated code
    #: hits (``RAW_ERRORS``); ``malformed(label, exc)`` is the error ``decode`` would raise.
    raw: Decoder

    def encode_value(self, value: Any) -> bytes:
        out = bytearray()
        self.encode(value, out)
        return bytes(out)


_ENTRY = """
def decode(buf, pos=0):
    try:
        if type(buf) is not bytes:
            buf = bytes(buf)
        return {decoder}(buf, pos)
    except _RAW as exc:
        raise _malformed(_LABEL, exc) from None


def encode(v, out):
    try:
        {encoder}(v, out)
    except _RAW as exc:
        raise _unencodable(_LABEL, exc) from None
"""


def compile_struct(
    fields: tuple[Field, ...],
    version: int,
    flexible: bool,
    *,
    label: str = "struct",
    project: Sequence[str] | None = None,
    missing: dict[str, Any] | None = None,
    factory: Callable[..., Any] | None = None,
) -> CompiledStruct:
    """Generate, ``exec`` and return the codec of a field table at one version.

    The inputs are those of ``builder.build_struct``. With ``project`` the decoder returns
    ``factory(*values)`` (a tuple without a factory) of the named fields, in that order,
    instead of a Container; names absent at this version take ``missing[name]``. The
    encoder always takes a dict.
    """
    st = _struct_ir(fields, version, flexible)
    gen = _Gen()
    if project is None:
        decoder = gen.struct_decoder(st)
    else:
        decoder = gen.projection_decoder(st, project, missing or {}, factory)
    encoder = gen.struct_encoder(st)
    gen.ns["_LABEL"] = label
    source = gen.source() + _ENTRY.format(decoder=decoder, encoder=encoder)
    namespace = gen.ns
    exec(compile(source, f"<compiled {label}>", "exec"), namespace)
    for table, entries in gen.tables:
        namespace[table] = {tag: (name, namespace[fn]) for tag, name, fn in entries}
    names = tuple(m.name for m in st.plain) + tuple(m.name for m in st.tagged)
    return CompiledStruct(label, flexible, names, namespace["decode"], namespace["encode"], source,
                          namespace[decoder])



_COMPILED: dict[tuple[Message, int], CompiledStruct] = {}


def compiled_for(message: Message, version: int) -> CompiledStruct:
    """The generated codec of ``message`` at ``version`` (built once, then cached).

    Only versions the message declares are ever cached, so a hit also means the version
    is valid.
    """
    built = _COMPILED.get((message, version))
    if built is None:
        if not message.has_version(version):
            raise ValueError(f"{message.name} has no version {version}")
        built = compile_struct(
            message.fields, version, message.is_flexible(version), label=f"{message.name} v{version}"
        )
        _COMPILED[(message, version)] = built
    return built
