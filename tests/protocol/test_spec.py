"""Every declared message matches Kafka's own JSON message definitions.

The reference lives in ``shared/kafka-spec`` beside the repository root (Kafka's
``clients/src/main/resources/common/message/*.json``). DeleteTopics, CreatePartitions,
AlterConfigs, IncrementalAlterConfigs, DeleteRecords and OffsetForLeaderEpoch are not in it; for those the JSON
bundled with kafka-python is used instead.

For each JSON field whose versions overlap the served versions (recursively, through
nested and common structs) the declaration must have a field of the same snake_case name,
type, versions, nullable versions, tag and tagged versions, per-field flexible versions
and int/bool default, in the same order, and nothing the JSON lacks. Version sets are
compared only over the versions served where the enclosing struct is present.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import kafka.protocol.schemas.resources as kafka_python_resources
import pytest

from protocol.errors import ErrorCode
from protocol.messages import (
    PAIRS,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    RequestHeader,
    ResponseHeader,
    coordinator_records,
    transaction_records,
)
from protocol.schema import Array, Field, FieldType, Message, Primitive, Struct, Versions

REPO_ROOT = Path(__file__).resolve().parents[2]
SPEC_DIR = REPO_ROOT.parent / "shared" / "kafka-spec"
MESSAGES_DIR = SPEC_DIR / "messages"
FALLBACK_DIR = Path(kafka_python_resources.__file__).resolve().parent
FALLBACK_ONLY = {
    "DeleteTopicsRequest",
    "DeleteTopicsResponse",
    "CreatePartitionsRequest",
    "CreatePartitionsResponse",
    "AlterConfigsRequest",
    "AlterConfigsResponse",
    "IncrementalAlterConfigsRequest",
    "IncrementalAlterConfigsResponse",
    "DeleteRecordsRequest",
    "DeleteRecordsResponse",
    "OffsetForLeaderEpochRequest",
    "OffsetForLeaderEpochResponse",
}

# kafka-python's JSON comes from Kafka 4.x, which dropped DeleteTopics v0 and
# OffsetForLeaderEpoch v0-v1 (KIP-896); those layouts are still described by the
# same fields ("0+"), so only validVersions' lower bound differs from what we serve.
FALLBACK_VALID_LO = {
    "DeleteTopicsRequest": 1,
    "DeleteTopicsResponse": 1,
    "OffsetForLeaderEpochRequest": 2,
    "OffsetForLeaderEpochResponse": 2,
}

DECLARED: list[Message] = [m for pair in PAIRS for m in pair] + [
    RequestHeader,
    ResponseHeader,
    ConsumerProtocolSubscription,
    ConsumerProtocolAssignment,
]

INT_TYPES = {"int8", "int16", "uint16", "int32", "int64"}
PRIMITIVES = INT_TYPES | {"bool", "float64", "string", "bytes", "records", "uuid"}


def needs_spec() -> None:
    if not MESSAGES_DIR.is_dir():
        pytest.skip(f"Kafka spec not found at {MESSAGES_DIR}")


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def load_json(path: Path) -> dict[str, Any]:
    text = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("//"))
    data: dict[str, Any] = json.loads(text)
    return data


def spec_for(name: str) -> tuple[dict[str, Any], bool]:
    """The JSON for a message, and whether it came from the kafka-python fallback."""
    path = MESSAGES_DIR / f"{name}.json"
    if path.exists():
        return load_json(path), False
    if name in FALLBACK_ONLY:
        return load_json(FALLBACK_DIR / f"{name}.json"), True
    raise AssertionError(f"no spec JSON for {name} in {MESSAGES_DIR}")


def served_set(text: str | None, within: set[int]) -> set[int]:
    if text is None:
        return set()
    parsed = Versions.parse(text)
    return {v for v in within if v in parsed}


def declared_type(type_: FieldType) -> str:
    if isinstance(type_, Array):
        return "[]" + declared_type(type_.of)
    if isinstance(type_, Struct):
        return type_.name
    assert isinstance(type_, Primitive)
    return type_.name


def struct_fields_of(
    spec_field: dict[str, Any], common: dict[str, list[dict[str, Any]]]
) -> list[dict[str, Any]] | None:
    """The nested fields of a JSON struct field (inline or from commonStructs), else None."""
    if "fields" in spec_field:
        fields: list[dict[str, Any]] = spec_field["fields"]
        return fields
    base = spec_field["type"].removeprefix("[]")
    if base in PRIMITIVES:
        return None
    if base not in common:
        raise AssertionError(f"struct type {base} has neither fields nor a commonStructs entry")
    return common[base]


def parse_default(kind: str, raw: Any) -> Any:
    if kind == "bool":
        return str(raw).lower() == "true"
    return int(str(raw), 0)


def compare_fields(
    where: str,
    declared: tuple[Field, ...],
    spec_fields: list[dict[str, Any]],
    served: set[int],
    common: dict[str, list[dict[str, Any]]],
    problems: list[str],
) -> None:
    by_name = {decl.name: decl for decl in declared}
    spec_names: list[str] = []
    for spec_field in spec_fields:
        name = snake(spec_field["name"])
        path = f"{where}.{name}"
        spec_present = served_set(spec_field.get("versions", spec_field.get("taggedVersions")), served)
        decl = by_name.get(name)
        if decl is None:
            if spec_present:
                problems.append(f"{path}: in the spec for versions {sorted(spec_present)}, not declared")
            continue
        spec_names.append(name)
        ours_present = served_set(decl.versions, served)
        if ours_present != spec_present:
            problems.append(
                f"{path}: versions served {sorted(ours_present)} != spec {sorted(spec_present)}"
                f" (declared {decl.versions!r}, spec {spec_field['versions']!r})"
            )
        within = spec_present & ours_present
        ours_type, spec_type = declared_type(decl.type), spec_field["type"]
        if ours_type != spec_type:
            problems.append(f"{path}: type {ours_type} != spec {spec_type}")
        checks = [
            ("nullable versions", decl.nullable, spec_field.get("nullableVersions")),
            ("tagged versions", decl.tagged, spec_field.get("taggedVersions")),
        ]
        for what, ours_text, spec_text in checks:
            ours_set, spec_set = served_set(ours_text, within), served_set(spec_text, within)
            if ours_set != spec_set:
                problems.append(f"{path}: {what} {sorted(ours_set)} != spec {sorted(spec_set)}")
        if decl.tag != spec_field.get("tag"):
            problems.append(f"{path}: tag {decl.tag} != spec {spec_field.get('tag')}")
        spec_flexible = spec_field.get("flexibleVersions")
        if (decl.flexible is None) != (spec_flexible is None) or served_set(
            decl.flexible, within
        ) != served_set(spec_flexible, within):
            problems.append(f"{path}: field flexibleVersions {decl.flexible!r} != spec {spec_flexible!r}")
        if spec_type in INT_TYPES | {"bool"} and within:
            expected = parse_default(
                spec_type, spec_field.get("default", "false" if spec_type == "bool" else 0)
            )
            actual = decl.default_value(min(within))
            if actual != expected or type(actual) is not type(expected):
                problems.append(f"{path}: default {actual!r} != spec {expected!r}")
        nested_spec = struct_fields_of(spec_field, common)
        base = decl.type.of if isinstance(decl.type, Array) else decl.type
        if nested_spec is not None and isinstance(base, Struct):
            compare_fields(
                path + ("[]" if isinstance(decl.type, Array) else ""),
                base.fields,
                nested_spec,
                within,
                common,
                problems,
            )
    spec_all = {snake(f["name"]) for f in spec_fields}
    for decl in declared:
        if decl.name not in spec_all:
            problems.append(f"{where}.{decl.name}: declared, but not in the spec")
    ours_order = [decl.name for decl in declared if decl.name in spec_names]
    if ours_order != spec_names:
        problems.append(f"{where}: field order {ours_order} != spec {spec_names}")


def spec_problems(message: Message) -> list[str]:
    if message.kind == "data" and (SPEC_DIR / "records" / f"{message.name}.json").exists():
        return record_problems(message)
    spec, fallback = spec_for(message.name)
    problems: list[str] = []
    served = set(range(message.min_version, message.max_version + 1))
    if spec["name"] != message.name:
        problems.append(f"name {message.name} != spec {spec['name']}")
    if spec["type"] != message.kind:
        problems.append(f"kind {message.kind} != spec {spec['type']}")
    if spec.get("apiKey") != message.api_key:
        problems.append(f"api_key {message.api_key} != spec {spec.get('apiKey')}")
    valid = Versions.parse(spec["validVersions"])
    valid_lo = valid.lo
    if fallback and message.name in FALLBACK_VALID_LO:
        assert valid_lo == FALLBACK_VALID_LO[message.name], "fallback JSON changed; revisit the allowance"
        valid_lo = 0
    if not (valid_lo <= message.min_version and (valid.hi is None or message.max_version <= valid.hi)):
        problems.append(
            f"served versions {message.versions} not within spec validVersions {spec['validVersions']}"
        )
    if Versions.parse(message.flexible) != Versions.parse(spec["flexibleVersions"]):
        problems.append(f"flexible versions {message.flexible!r} != spec {spec['flexibleVersions']!r}")
    common = {s["name"]: s["fields"] for s in spec.get("commonStructs", [])}
    compare_fields(message.name, message.fields, spec["fields"], served, common, problems)
    return problems


def record_problems(message: Message) -> list[str]:
    """A ``__consumer_offsets`` key or value against its JSON in the spec's records/."""
    spec = load_json(SPEC_DIR / "records" / f"{message.name}.json")
    problems: list[str] = []
    if Versions.parse(message.versions) != Versions.parse(spec["validVersions"]):
        problems.append(f"versions {message.versions!r} != spec {spec['validVersions']!r}")
    if Versions.parse(message.flexible) != Versions.parse(spec["flexibleVersions"]):
        problems.append(f"flexible versions {message.flexible!r} != spec {spec['flexibleVersions']!r}")
    served = set(range(message.min_version, message.max_version + 1))
    common = {s["name"]: s["fields"] for s in spec.get("commonStructs", [])}
    compare_fields(message.name, message.fields, spec["fields"], served, common, problems)
    return problems


RECORDS: list[Message] = [
    value for module in (coordinator_records, transaction_records)
    for value in vars(module).values() if isinstance(value, Message)
]


@pytest.mark.parametrize("message", RECORDS, ids=lambda m: m.name)
def test_record_declaration_matches_spec(message: Message) -> None:
    needs_spec()
    problems = spec_problems(message)
    assert not problems, f"{message.name} differs from the spec:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("message", DECLARED, ids=lambda m: m.name)
def test_declaration_matches_spec(message: Message) -> None:
    if message.name not in FALLBACK_ONLY:
        needs_spec()
    problems = spec_problems(message)
    assert not problems, f"{message.name} differs from the spec:\n  " + "\n  ".join(problems)


def test_every_declared_api_is_in_the_api_index() -> None:
    """Served request/response ranges lie within api-index.tsv's valid and flexible ranges."""
    needs_spec()
    with (SPEC_DIR / "api-index.tsv").open() as handle:
        rows = {int(row["api_key"]): row for row in csv.DictReader(handle, delimiter="\t")}
    missing = []
    for request, response in PAIRS:
        assert request.api_key == response.api_key
        row = rows.get(request.api_key)  # type: ignore[arg-type]
        if row is None:
            missing.append(request.name)
            continue
        for message, valid, flexible in (
            (request, row["request_valid"], row["request_flexible"]),
            (response, row["response_valid"], row["response_flexible"]),
        ):
            parsed = Versions.parse(valid)
            assert parsed.lo <= message.min_version and parsed.hi is not None
            assert message.max_version <= parsed.hi, f"{message.name} serves beyond {valid}"
            assert Versions.parse(message.flexible) == Versions.parse(flexible), message.name
    # The APIs whose JSON comes from kafka-python are outside the coordinator's index.
    assert set(missing) <= {m for m in FALLBACK_ONLY if m.endswith("Request")}, missing


def test_comparison_catches_a_wrong_declaration() -> None:
    """The checker itself: a deliberately wrong table is reported, field by field."""
    needs_spec()
    from protocol.messages import HeartbeatRequest

    broken = Message(
        HeartbeatRequest.name,
        api_key=HeartbeatRequest.api_key,
        kind="request",
        versions=HeartbeatRequest.versions,
        flexible=HeartbeatRequest.flexible,
        fields=(
            Field("generation_id", HeartbeatRequest.fields[1].type, "0+"),
            Field("group_id", HeartbeatRequest.fields[0].type, "1+"),
            Field("member_id", HeartbeatRequest.fields[0].type, "0+", nullable="0+"),
            Field("made_up", HeartbeatRequest.fields[0].type, "0+"),
        ),
    )
    report = "\n".join(spec_problems(broken))
    assert "group_instance_id: in the spec" in report
    assert "group_id: versions served" in report
    assert "member_id: nullable versions" in report
    assert "made_up: declared, but not in the spec" in report
    assert "field order" in report


def read_errors() -> dict[int, str]:
    with (SPEC_DIR / "errors.tsv").open() as handle:
        return {int(row["code"]): row["name"] for row in csv.DictReader(handle, delimiter="\t")}


def test_error_codes_match_spec() -> None:
    needs_spec()
    spec = read_errors()
    ours = {member.value: member.name for member in ErrorCode}
    missing = {code: name for code, name in spec.items() if ours.get(code) != name}
    extra = {code: name for code, name in ours.items() if spec.get(code) != name}
    assert not missing and not extra, f"not in ErrorCode (or renamed): {missing}; not in errors.tsv: {extra}"
    assert len(ErrorCode) == len(spec)  # no aliases hiding a duplicate value


def test_group_max_size_reached_is_81() -> None:
    assert ErrorCode.GROUP_MAX_SIZE_REACHED == 81
    assert ErrorCode(81).name == "GROUP_MAX_SIZE_REACHED"
