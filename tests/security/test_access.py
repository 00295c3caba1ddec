"""The authorization rules, one request at a time: what is refused, what is narrowed, and
that every refusal is a reply Kafka's schemas describe.

The end-to-end matrix (tests/integration/test_authorization_matrix.py) covers whole
refusals on the real broker; these cover the batch APIs' per-item paths, and the rules of
APIs whose handlers are not registered yet (their replies are checked against Kafka's JSON).
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import kafka.protocol.schemas.resources as kafka_python_resources
import pytest
from construct import Container

from protocol.api_keys import ApiKey
from protocol.codec import encode_response
from protocol.errors import ErrorCode
from protocol.messages import REQUESTS, RESPONSES
from security.access import RULES
from security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    bit_field,
)
from security.authorizer import Authorizer
from security.gate import Drop, Gate, Narrow, Refuse

Op = AclOperation
R = ResourceType
E = ErrorCode
SPEC = Path(__file__).resolve().parents[3] / "shared" / "kafka-spec" / "messages"
FALLBACK = Path(kafka_python_resources.__file__).resolve().parent


class Topics:
    def __init__(self, names: dict[str, uuid.UUID]) -> None:
        self.names = names

    def topic_exists(self, name: str) -> bool:
        return name in self.names

    def topic_name(self, topic_id: Any) -> str | None:
        return next((n for n, i in self.names.items() if i == topic_id), None)


T1, T2 = uuid.uuid4(), uuid.uuid4()


def gate(*allowed: tuple[ResourceType, str, AclOperation], topics: dict[str, uuid.UUID] | None = None) -> Gate:
    bindings = [AclBinding(ResourcePattern(r, n, PatternType.LITERAL),
                           AccessControlEntry("User:u", "*", op, AclPermissionType.ALLOW)) for r, n, op in allowed]
    return Gate(Authorizer(bindings), "User:u", "127.0.0.1", Topics(topics or {"a": T1, "b": T2}))


def C(**values: Any) -> Container:
    out = Container()
    for k, v in values.items():
        out[k] = [C(**i) if isinstance(i, dict) else i for i in v] if isinstance(v, list) else (
            C(**v) if isinstance(v, dict) else v)
    return out


def check(key: int, version: int, body: Container, g: Gate) -> Any:
    rule = RULES[key]
    assert rule.check is not None
    return rule.check(version, body, g)


# ---------------------------------------------------------------------- batch APIs, item by item


def test_produce_serves_the_allowed_topics_and_refuses_the_rest_per_partition() -> None:
    body = C(transactional_id=None, acks=-1, timeout_ms=1, topic_data=[
        {"name": "a", "partition_data": [{"index": 0, "records": b""}]},
        {"name": "b", "partition_data": [{"index": 0, "records": b""}, {"index": 1, "records": b""}]}])
    decision = check(ApiKey.PRODUCE, 9, body, gate((R.TOPIC, "a", Op.WRITE)))
    assert isinstance(decision, Narrow) and [t.name for t in decision.body.topic_data] == ["a"]
    assert decision.amend is not None
    reply = decision.amend(C(responses=[{"name": "a", "partition_responses": []}], throttle_time_ms=0))
    denied = reply["responses"][1]
    assert denied.name == "b" and [p.error_code for p in denied.partition_responses] == [29, 29]
    encode_response(ApiKey.PRODUCE, 9, 1, reply)
    acks0 = C(**{**body, "acks": 0})
    assert isinstance(check(ApiKey.PRODUCE, 9, acks0, gate((R.TOPIC, "a", Op.WRITE))), Drop)
    assert check(ApiKey.PRODUCE, 9, body, gate((R.TOPIC, "a", Op.WRITE), (R.TOPIC, "b", Op.WRITE))) is None


def test_offset_for_leader_epoch_needs_describe_per_topic_unless_cluster_action() -> None:
    body = C(replica_id=-1, topics=[
        {"topic": "a", "partitions": [{"partition": 0, "current_leader_epoch": 1, "leader_epoch": 1}]},
        {"topic": "b", "partitions": [{"partition": 2, "current_leader_epoch": 1, "leader_epoch": 1}]}])
    decision = check(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, body, gate((R.TOPIC, "a", Op.DESCRIBE)))
    assert isinstance(decision, Narrow) and [t.topic for t in decision.body.topics] == ["a"]
    assert decision.amend is not None
    reply = decision.amend(C(throttle_time_ms=0, topics=[{"topic": "a", "partitions": [
        {"error_code": 0, "partition": 0, "leader_epoch": 1, "end_offset": 5}]}]))
    denied = reply["topics"][1]
    assert denied.topic == "b" and [(p.partition, p.error_code, p.end_offset) for p in denied.partitions] == [
        (2, 29, -1)]
    encode_response(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, 1, reply)
    assert isinstance(check(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, body, gate()), Refuse)
    # Kafka's KafkaApis: CLUSTER_ACTION on the cluster (a follower) may ask about every topic.
    follower = C(**{**body, "replica_id": 2})
    assert check(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, follower, gate((R.CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION))) \
        is None


def test_offset_fetch_v8_keeps_the_group_order_and_hides_undescribable_topics() -> None:
    body = C(groups=[{"group_id": "g1", "member_id": None, "member_epoch": -1, "topics": None},
                     {"group_id": "g2", "member_id": None, "member_epoch": -1,
                      "topics": [{"name": "a", "partition_indexes": [0]}, {"name": "b", "partition_indexes": [0]}]},
                     {"group_id": "g3", "member_id": None, "member_epoch": -1, "topics": None}],
             require_stable=False)
    g = gate((R.GROUP, "g1", Op.DESCRIBE), (R.GROUP, "g2", Op.DESCRIBE), (R.TOPIC, "a", Op.DESCRIBE))
    decision = check(ApiKey.OFFSET_FETCH, 8, body, g)
    assert isinstance(decision, Narrow) and decision.amend is not None
    assert [x.group_id for x in decision.body.groups] == ["g1", "g2"]
    assert [t.name for t in decision.body.groups[1].topics] == ["a"]

    def fetched(name: str) -> dict[str, Any]:
        return {"name": name, "partitions": [{"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                                              "metadata": "", "error_code": 0}]}
    reply = decision.amend(C(throttle_time_ms=0, groups=[
        {"group_id": "g2", "topics": [fetched("a")], "error_code": 0},
        {"group_id": "g1", "topics": [fetched("a"), fetched("b")], "error_code": 0}]))
    groups = {x["group_id"]: x for x in reply["groups"]}
    assert [x["group_id"] for x in reply["groups"]] == ["g1", "g2", "g3"]
    assert [t["name"] for t in groups["g1"]["topics"]] == ["a"]  # all topics: silently filtered
    assert [(t["name"], t["partitions"][0]["error_code"]) for t in groups["g2"]["topics"]] == [("a", 0), ("b", 29)]
    assert groups["g3"]["error_code"] == 30 and not groups["g3"]["topics"]
    encode_response(ApiKey.OFFSET_FETCH, 8, 1, reply)


def test_offset_commit_refuses_topics_one_by_one_once_the_group_is_allowed() -> None:
    body = C(group_id="g", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None, topics=[
        {"name": "a", "partitions": [{"partition_index": 0}]}, {"name": "b", "partitions": [{"partition_index": 0}]}])
    decision = check(ApiKey.OFFSET_COMMIT, 8, body, gate((R.GROUP, "g", Op.READ), (R.TOPIC, "b", Op.READ)))
    assert isinstance(decision, Narrow) and decision.amend is not None
    assert [t.name for t in decision.body.topics] == ["b"]
    reply = decision.amend(C(throttle_time_ms=0, topics=[{"name": "b", "partitions": [
        {"partition_index": 0, "error_code": 0}]}]))
    assert [(t["name"], t["partitions"][0]["error_code"]) for t in reply["topics"]] == [("a", 29), ("b", 0)]
    refused = check(ApiKey.OFFSET_COMMIT, 8, body, gate((R.TOPIC, "b", Op.READ)))
    assert isinstance(refused, Refuse) and {p.error_code for t in refused.body["topics"] for p in t.partitions} == {30}


def test_metadata_filters_all_topics_silently_and_refuses_named_ones() -> None:
    g = gate((R.TOPIC, "a", Op.DESCRIBE))
    decision = check(ApiKey.METADATA, 12, C(topics=None, allow_auto_topic_creation=True,
                                            include_topic_authorized_operations=True), g)
    assert isinstance(decision, Narrow) and decision.amend is not None

    def topic(name: str) -> dict[str, Any]:
        return {"error_code": 0, "name": name, "topic_id": T1, "is_internal": False, "partitions": [],
                "topic_authorized_operations": -2147483648}
    reply = decision.amend(C(throttle_time_ms=0, brokers=[], cluster_id="c", controller_id=0,
                             topics=[topic("a"), topic("b")]))
    assert [t["name"] for t in reply["topics"]] == ["a"]
    assert reply["topics"][0]["topic_authorized_operations"] == bit_field([Op.DESCRIBE])
    assert not g.denied  # silent: no audit line, no denial counted

    named = check(ApiKey.METADATA, 12, C(topics=[{"name": "b", "topic_id": uuid.UUID(int=0)},
                                                 {"name": None, "topic_id": T2},
                                                 {"name": "new", "topic_id": uuid.UUID(int=0)}],
                                         allow_auto_topic_creation=True, include_topic_authorized_operations=False),
                  gate((R.TOPIC, "new", Op.DESCRIBE)))
    assert isinstance(named, Narrow) and named.amend is not None and named.body.topics == []
    reply = named.amend(C(throttle_time_ms=0, brokers=[], cluster_id="c", controller_id=0, topics=[]))
    assert [(t["name"], t["topic_id"], t["error_code"]) for t in reply["topics"]] == [
        ("b", uuid.UUID(int=0), 29), (None, T2, 29), ("new", uuid.UUID(int=0), 29)]  # "new": no CREATE
    encode_response(ApiKey.METADATA, 12, 1, reply)


def test_describe_groups_reports_real_authorized_operations() -> None:
    g = gate((R.GROUP, "g", Op.READ))
    decision = check(ApiKey.DESCRIBE_GROUPS, 5, C(groups=["g", "h"], include_authorized_operations=True), g)
    assert isinstance(decision, Narrow) and decision.amend is not None and decision.body.groups == ["g"]
    reply = decision.amend(C(throttle_time_ms=0, groups=[{
        "error_code": 0, "group_id": "g", "group_state": "Empty", "protocol_type": "", "protocol_data": "",
        "members": [], "authorized_operations": bit_field([Op.READ, Op.DESCRIBE, Op.DELETE])}]))
    assert reply["groups"][0]["authorized_operations"] == bit_field([Op.READ, Op.DESCRIBE])
    assert reply["groups"][1]["group_id"] == "h" and reply["groups"][1]["error_code"] == 30
    encode_response(ApiKey.DESCRIBE_GROUPS, 5, 1, reply)


def test_list_groups_shows_only_describable_groups_unless_the_cluster_is() -> None:
    decision = check(ApiKey.LIST_GROUPS, 4, C(states_filter=[]), gate((R.GROUP, "g", Op.DESCRIBE)))
    assert isinstance(decision, Narrow) and decision.amend is not None
    reply = decision.amend(C(throttle_time_ms=0, error_code=0, groups=[
        {"group_id": "g", "protocol_type": "consumer", "group_state": "Empty"},
        {"group_id": "h", "protocol_type": "consumer", "group_state": "Empty"}]))
    assert [x["group_id"] for x in reply["groups"]] == ["g"]
    assert check(ApiKey.LIST_GROUPS, 4, C(states_filter=[]), gate((R.CLUSTER, "kafka-cluster", Op.DESCRIBE))) is None


def test_create_topics_hides_configs_without_describe_configs() -> None:
    body = C(topics=[{"name": "x", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []},
                     {"name": "y", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
             timeout_ms=1, validate_only=False)
    decision = check(ApiKey.CREATE_TOPICS, 7, body, gate((R.TOPIC, "x", Op.CREATE)))
    assert isinstance(decision, Narrow) and decision.amend is not None
    assert [t.name for t in decision.body.topics] == ["x"]
    created = {"name": "x", "topic_id": T1, "error_code": 0, "error_message": None, "topic_config_error_code": 0,
               "num_partitions": 1, "replication_factor": 1, "configs": [{"name": "retention.ms", "value": "1",
                                                                         "read_only": False, "config_source": 5,
                                                                         "is_sensitive": False}]}
    reply = decision.amend(C(throttle_time_ms=0, topics=[created]))
    assert reply["topics"][0]["configs"] == [] and reply["topics"][0]["topic_config_error_code"] == 29
    assert reply["topics"][1]["name"] == "y" and reply["topics"][1]["error_code"] == 29
    encode_response(ApiKey.CREATE_TOPICS, 7, 1, reply)
    on_cluster = check(ApiKey.CREATE_TOPICS, 7, body, gate((R.CLUSTER, "kafka-cluster", Op.CREATE),
                                                          (R.TOPIC, "x", Op.DESCRIBE_CONFIGS),
                                                          (R.TOPIC, "y", Op.DESCRIBE_CONFIGS)))
    assert on_cluster is None


def test_delete_topics_by_id_hides_the_name_without_describe() -> None:
    body = C(topics=[{"name": None, "topic_id": T1}, {"name": None, "topic_id": T2}], timeout_ms=1)
    decision = check(ApiKey.DELETE_TOPICS, 6, body, gate((R.TOPIC, "b", Op.DELETE)))
    assert isinstance(decision, Narrow) and decision.amend is not None
    assert [t.topic_id for t in decision.body.topics] == [T2]
    reply = decision.amend(C(throttle_time_ms=0, responses=[]))
    assert [(r["name"], r["topic_id"], r["error_code"]) for r in reply["responses"]] == [(None, T1, 29)]


def test_init_producer_id_needs_idempotent_write_or_write_on_some_topic() -> None:
    body = C(transactional_id=None, transaction_timeout_ms=1, producer_id=-1, producer_epoch=-1)
    assert check(ApiKey.INIT_PRODUCER_ID, 4, body, gate((R.TOPIC, "a", Op.WRITE))) is None
    assert check(ApiKey.INIT_PRODUCER_ID, 4, body, gate((R.CLUSTER, "kafka-cluster", Op.IDEMPOTENT_WRITE))) is None
    refused = check(ApiKey.INIT_PRODUCER_ID, 4, body, gate((R.TOPIC, "a", Op.READ)))
    assert isinstance(refused, Refuse) and refused.body["error_code"] == 31
    txn = check(ApiKey.INIT_PRODUCER_ID, 4, C(**{**body, "transactional_id": "t"}), gate())
    assert isinstance(txn, Refuse) and txn.body["error_code"] == 53


def test_find_coordinator_refuses_keys_one_by_one() -> None:
    decision = check(ApiKey.FIND_COORDINATOR, 4, C(key_type=0, coordinator_keys=["g", "h"]),
                     gate((R.GROUP, "g", Op.DESCRIBE)))
    assert isinstance(decision, Narrow) and decision.amend is not None and decision.body.coordinator_keys == ["g"]
    reply = decision.amend(C(throttle_time_ms=0, coordinators=[]))
    assert reply["coordinators"][0]["key"] == "h" and reply["coordinators"][0]["error_code"] == 30
    txn = check(ApiKey.FIND_COORDINATOR, 3, C(key="t", key_type=1), gate())
    assert isinstance(txn, Refuse) and txn.body["error_code"] == 53


# ---------------------------------------------------------------------- replies match Kafka's schemas


def _spec(name: str) -> dict[str, Any]:
    for directory in (SPEC, FALLBACK):
        path = directory / f"{name}.json"
        if path.exists():
            text = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("//"))
            data: dict[str, Any] = json.loads(text)
            return data
    pytest.skip(f"no JSON for {name}")


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _names(fields: list[dict[str, Any]], common: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields:
        sub = f.get("fields") or common.get(f["type"].removeprefix("[]"))
        out[_snake(f["name"])] = _names(sub, common) if sub else None
    return out


def _conforms(value: Any, names: dict[str, Any], path: str) -> None:
    if isinstance(value, list):
        for item in value:
            _conforms(item, names, path)
        return
    assert isinstance(value, dict), path
    for key, item in value.items():
        assert key in names, f"{path}.{key} is not a field of Kafka's reply"
        if names[key] is not None and item is not None:
            _conforms(item, names[key], f"{path}.{key}")


# A request for each rule whose API may not be served yet, that every check refuses.
UNSERVED: dict[int, tuple[int, Container]] = {
    ApiKey.DESCRIBE_CONFIGS: (4, C(resources=[{"resource_type": 2, "resource_name": "a", "configuration_keys": None},
                                              {"resource_type": 4, "resource_name": "0", "configuration_keys": None},
                                              {"resource_type": 32, "resource_name": "g", "configuration_keys": None}],
                                   include_synonyms=False, include_documentation=False)),
    ApiKey.ALTER_CONFIGS: (2, C(resources=[{"resource_type": 2, "resource_name": "a", "configs": []}],
                                validate_only=False)),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (1, C(resources=[{"resource_type": 2, "resource_name": "a", "configs": []},
                                                       {"resource_type": 32, "resource_name": "g", "configs": []}],
                                            validate_only=False)),
    ApiKey.DELETE_RECORDS: (2, C(topics=[{"name": "a", "partitions": [{"partition_index": 0, "offset": 1}]}],
                                 timeout_ms=1)),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, C(group_id="g", member_id="", member_epoch=0,
                                           subscribed_topic_names=["a"])),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, C(group_ids=["g"], include_authorized_operations=True)),
    ApiKey.ADD_PARTITIONS_TO_TXN: (3, C(v3_and_below_transactional_id="t", v3_and_below_producer_id=1,
                                        v3_and_below_producer_epoch=0,
                                        v3_and_below_topics=[{"name": "a", "partitions": [0, 1]}])),
    ApiKey.ADD_OFFSETS_TO_TXN: (3, C(transactional_id="t", producer_id=1, producer_epoch=0, group_id="g")),
    ApiKey.END_TXN: (3, C(transactional_id="t", producer_id=1, producer_epoch=0, committed=True)),
    ApiKey.WRITE_TXN_MARKERS: (1, C(markers=[{"producer_id": 1, "producer_epoch": 0, "transaction_result": True,
                                              "topics": [{"name": "a", "partition_indexes": [0]}],
                                              "coordinator_epoch": 0}])),
    ApiKey.TXN_OFFSET_COMMIT: (3, C(transactional_id="t", group_id="g", producer_id=1, producer_epoch=0, topics=[
        {"name": "a", "partitions": [{"partition_index": 0, "committed_offset": 1}]}])),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, C(transactional_ids=["t"])),
    ApiKey.DESCRIBE_PRODUCERS: (0, C(topics=[{"name": "a", "partition_indexes": [0]}])),
    ApiKey.DESCRIBE_ACLS: (3, C(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                principal_filter=None, host_filter=None, operation=1, permission_type=1)),
    ApiKey.CREATE_ACLS: (3, C(creations=[{"resource_type": 2}])),
    ApiKey.DELETE_ACLS: (3, C(filters=[{"resource_type_filter": 2}])),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, C(deletions=[{"name": "x", "mechanism": 1}], upsertions=[])),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, C(users=None)),
}


@pytest.mark.parametrize("key", sorted(UNSERVED), ids=lambda k: ApiKey(k).name)
def test_every_refusal_is_a_reply_of_kafkas_schema(key: int) -> None:
    version, body = UNSERVED[key]
    decision = check(key, version, body, gate())
    assert isinstance(decision, Refuse), decision
    spec = _spec(f"{ApiKey(key).name.title().replace('_', '')}Response")
    names = _names(spec["fields"], {c["name"]: c["fields"] for c in spec.get("commonStructs", [])})
    _conforms(decision.body, names, ApiKey(key).name)
    codes = json.dumps(decision.body, default=str)
    assert any(f'"{int(c)}"' in codes or f": {int(c)}" in codes for c in (29, 30, 31, 53)), decision.body
    if key in RESPONSES:  # declared here: it must also encode
        encode_response(key, version, 1, decision.body)


def test_every_api_kcoord_declares_has_a_rule() -> None:
    assert not [ApiKey(k).name for k in REQUESTS if k not in RULES]


def test_the_security_doc_lists_what_every_api_needs() -> None:
    from security.access import reference_markdown

    doc = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    assert reference_markdown() in doc, "docs/security.md is stale: paste security.access.reference_markdown()"
