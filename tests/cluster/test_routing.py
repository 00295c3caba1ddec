"""Which requests a cluster node serves, and Kafka's errors for the others (cluster.routing)."""

from __future__ import annotations

import uuid
from typing import Any

from construct import Container

from cluster.routing import FENCED, NOT_COORDINATOR, NOT_LEADER, UNKNOWN_EPOCH, decide
from protocol.api_keys import ApiKey
from protocol.codec import decode_request, encode_request, encode_response
from protocol.consumer_offsets import partition_for
from protocol.messages import REQUESTS
from security.gate import Drop, Narrow, Refuse


class Directory:
    """Node 1 leads partitions 0 of every topic, node 2 the others; node 1 coordinates 'mine'."""

    def __init__(self, offsets_partitions: int = 50) -> None:
        self.offsets_partitions = offsets_partitions

    def known(self, topic: str, partition: int) -> bool:
        return topic != "unknown"

    def serving(self, topic: str, partition: int) -> bool:
        return partition == 0

    def current_leader(self, topic: str, partition: int) -> tuple[int, int]:
        return (1, 10) if partition == 0 else (2, 20)

    def coordinates(self, group_id: str) -> bool:
        return group_id.startswith("mine")

    def coordinates_transaction(self, transactional_id: str) -> bool:
        return transactional_id.startswith("mine")

    def endpoint(self, node_id: int) -> tuple[str, int, str | None] | None:
        return ("127.0.0.1", 9000 + node_id, None)


def body(api: ApiKey, version: int, **fields: Any) -> Any:
    """A request body as the router hands it over (decoded from real bytes)."""
    return decode_request(encode_request(api, version, 1, fields)[4:], {api: REQUESTS[api]}).body


def test_produce_to_partitions_led_elsewhere_is_narrowed_and_answered_with_the_leader() -> None:
    request = body(ApiKey.PRODUCE, 10, transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
        {"name": "t", "partition_data": [{"index": 0, "records": b""}, {"index": 1, "records": b""}]}])
    decision = decide(ApiKey.PRODUCE, 10, request, Directory())
    assert isinstance(decision, Narrow)
    assert [p.index for p in decision.body.topic_data[0].partition_data] == [0]
    served = Container(responses=[Container(name="t", partition_responses=[Container(index=0, error_code=0)])],
                       throttle_time_ms=0)
    assert decision.amend is not None
    answer = decision.amend(served)
    parts = answer["responses"][0]["partition_responses"]
    assert [(p["index"], p["error_code"]) for p in parts] == [(0, 0), (1, NOT_LEADER)]
    assert parts[1]["current_leader"] == {"leader_id": 2, "leader_epoch": 20}
    assert answer["node_endpoints"] == [{"node_id": 2, "host": "127.0.0.1", "port": 9002, "rack": None}]
    encode_response(ApiKey.PRODUCE, 10, 1, answer)  # the amended reply is a valid v10 body


def test_produce_before_v10_has_no_leader_fields() -> None:
    request = body(ApiKey.PRODUCE, 9, transactional_id=None, acks=1, timeout_ms=1000, topic_data=[
        {"name": "t", "partition_data": [{"index": 3, "records": b""}]}])
    decision = decide(ApiKey.PRODUCE, 9, request, Directory())
    assert isinstance(decision, Refuse)
    part = decision.body["responses"][0]["partition_responses"][0]
    assert part["error_code"] == NOT_LEADER and "current_leader" not in part
    encode_response(ApiKey.PRODUCE, 9, 1, decision.body)


def test_acks_0_produce_to_the_wrong_node_closes_the_connection() -> None:
    request = body(ApiKey.PRODUCE, 9, transactional_id=None, acks=0, timeout_ms=1000, topic_data=[
        {"name": "t", "partition_data": [{"index": 3, "records": b""}]}])
    assert isinstance(decide(ApiKey.PRODUCE, 9, request, Directory()), Drop)


def test_requests_about_served_or_unknown_partitions_pass_unchanged() -> None:
    request = body(ApiKey.PRODUCE, 9, transactional_id=None, acks=1, timeout_ms=1000, topic_data=[
        {"name": "t", "partition_data": [{"index": 0, "records": b""}]},
        {"name": "unknown", "partition_data": [{"index": 5, "records": b""}]}])
    assert decide(ApiKey.PRODUCE, 9, request, Directory()) is None


def test_fetch_before_v16_refuses_partitions_led_elsewhere_and_checks_the_clients_epoch() -> None:
    request = body(ApiKey.FETCH, 12, replica_id=-1, max_wait_ms=500, min_bytes=1, topics=[
        {"topic": "t", "partitions": [
            {"partition": 0, "current_leader_epoch": 10, "fetch_offset": 0, "partition_max_bytes": 1000},
            {"partition": 1, "current_leader_epoch": -1, "fetch_offset": 0, "partition_max_bytes": 1000}]},
        {"topic": "u", "partitions": [
            {"partition": 0, "current_leader_epoch": 9, "fetch_offset": 0, "partition_max_bytes": 1000},
        ]}], forgotten_topics_data=[])
    decision = decide(ApiKey.FETCH, 12, request, Directory())
    assert isinstance(decision, Narrow)
    assert [(t.topic, [p.partition for p in t.partitions]) for t in decision.body.topics] == [("t", [0])]
    assert decision.amend is not None
    answer = decision.amend(Container(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        Container(topic="t", partitions=[Container(partition_index=0, error_code=0)])]))
    errors = {(t["topic"], p["partition_index"]): p for t in answer["responses"] for p in t["partitions"]}
    assert errors[("t", 1)]["error_code"] == NOT_LEADER
    assert errors[("u", 0)]["error_code"] == FENCED  # epoch 9 < the leader's 10
    # Below v16 the reply cannot say where a leader is, so, as Kafka, it does not name one:
    # kafka-python 3.0.12 (Fetch v12) takes a named leader it has no address for and its
    # next ListOffsets to it raises UnknownBrokerIdError out of poll().
    for refused in (errors[("t", 1)], errors[("u", 0)]):
        assert dict(refused["current_leader"]) == {"leader_id": -1, "leader_epoch": -1}
    assert not answer.get("node_endpoints")
    encode_response(ApiKey.FETCH, 12, 1, answer)


def test_fetch_v16_names_the_leader_of_a_fenced_partition_too() -> None:
    request = body(ApiKey.FETCH, 16, max_wait_ms=500, min_bytes=1, topics=[
        {"topic_id": uuid.uuid4(), "partitions": [
            {"partition": 0, "current_leader_epoch": 9, "fetch_offset": 0, "partition_max_bytes": 1000}]}],
        forgotten_topics_data=[])
    request.topics[0]["topic"] = "u"
    decision = decide(ApiKey.FETCH, 16, request, Directory())
    assert isinstance(decision, Refuse)
    [part] = decision.body["responses"][0]["partitions"]
    assert part["error_code"] == FENCED
    assert part["current_leader"] == {"leader_id": 1, "leader_epoch": 10}
    assert decision.body["node_endpoints"] == [{"node_id": 1, "host": "127.0.0.1", "port": 9001, "rack": None}]


def test_fetch_v16_by_topic_id_answers_with_the_id_and_the_leaders_endpoint() -> None:
    topic_id = uuid.uuid4()
    request = body(ApiKey.FETCH, 16, max_wait_ms=500, min_bytes=1, topics=[
        {"topic_id": topic_id, "partitions": [
            {"partition": 1, "current_leader_epoch": -1, "fetch_offset": 0, "partition_max_bytes": 1000}]}],
        forgotten_topics_data=[])
    request.topics[0]["topic"] = "t"  # named by the router (broker.fetch_topics)
    decision = decide(ApiKey.FETCH, 16, request, Directory())
    assert isinstance(decision, Refuse)
    [topic] = decision.body["responses"]
    assert topic["topic_id"] == topic_id
    assert topic["partitions"][0]["current_leader"] == {"leader_id": 2, "leader_epoch": 20}
    assert decision.body["node_endpoints"] == [{"node_id": 2, "host": "127.0.0.1", "port": 9002, "rack": None}]


def test_fetch_v13_refused_partitions_join_their_topic_in_a_reply_that_names_topics_by_id() -> None:
    topic_id = uuid.uuid4()
    request = body(ApiKey.FETCH, 13, max_wait_ms=500, min_bytes=1, topics=[
        {"topic_id": topic_id, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "partition_max_bytes": 1000},
            {"partition": 1, "current_leader_epoch": -1, "fetch_offset": 0, "partition_max_bytes": 1000}]}],
        forgotten_topics_data=[])
    request.topics[0]["topic"] = "t"
    decision = decide(ApiKey.FETCH, 13, request, Directory())
    assert isinstance(decision, Narrow) and decision.amend is not None
    # A long poll's reply is decoded from its frame: topic ids, no names.
    answer = decision.amend(Container(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        Container(topic_id=topic_id, partitions=[Container(partition_index=0, error_code=0)])]))
    [topic] = answer["responses"]
    assert [(p["partition_index"], p["error_code"]) for p in topic["partitions"]] == [(0, 0), (1, NOT_LEADER)]


def test_a_v15_replica_fetch_is_left_to_the_cluster_handler() -> None:
    request = body(ApiKey.FETCH, 15, replica_state={"replica_id": 3, "replica_epoch": 9}, max_wait_ms=0,
                   min_bytes=0, topics=[{"topic_id": uuid.uuid4(), "partitions": [
                       {"partition": 1, "fetch_offset": 0, "partition_max_bytes": 1000}]}], forgotten_topics_data=[])
    assert decide(ApiKey.FETCH, 15, request, Directory()) is None


def test_a_newer_epoch_than_the_leaders_is_unknown() -> None:
    request = body(ApiKey.LIST_OFFSETS, 7, replica_id=-1, isolation_level=0, topics=[
        {"name": "t", "partitions": [{"partition_index": 0, "current_leader_epoch": 11, "timestamp": -1}]}])
    decision = decide(ApiKey.LIST_OFFSETS, 7, request, Directory())
    assert isinstance(decision, Refuse)
    assert decision.body["topics"][0]["partitions"][0]["error_code"] == UNKNOWN_EPOCH


def test_list_offsets_and_delete_records_are_narrowed_to_the_partitions_led_here() -> None:
    request = body(ApiKey.LIST_OFFSETS, 7, replica_id=-1, isolation_level=0, topics=[
        {"name": "t", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1},
                                     {"partition_index": 1, "current_leader_epoch": -1, "timestamp": -1}]}])
    decision = decide(ApiKey.LIST_OFFSETS, 7, request, Directory())
    assert isinstance(decision, Narrow) and decision.amend is not None
    assert [p.partition_index for p in decision.body.topics[0].partitions] == [0]
    answer = decision.amend(Container(throttle_time_ms=0, topics=[Container(name="t", partitions=[
        Container(partition_index=0, error_code=0, timestamp=-1, offset=5, leader_epoch=10)])]))
    assert [(p["partition_index"], p["error_code"], p["offset"]) for p in answer["topics"][0]["partitions"]] == [
        (0, 0, 5), (1, NOT_LEADER, -1)]
    encode_response(ApiKey.LIST_OFFSETS, 7, 1, answer)
    # DeleteRecords has no epoch to check; a partition led elsewhere is refused the same way.
    request = body(ApiKey.DELETE_RECORDS, 2, timeout_ms=1000, topics=[
        {"name": "t", "partitions": [{"partition_index": 1, "offset": 3}]}])
    refused = decide(ApiKey.DELETE_RECORDS, 2, request, Directory())
    assert isinstance(refused, Refuse)
    [part] = refused.body["topics"][0]["partitions"]
    assert (part["partition_index"], part["error_code"], part["low_watermark"]) == (1, NOT_LEADER, -1)
    encode_response(ApiKey.DELETE_RECORDS, 2, 1, refused.body)


def test_a_replicas_fetch_is_left_to_the_cluster_handler() -> None:
    request = body(ApiKey.FETCH, 12, replica_id=3, max_wait_ms=0, min_bytes=0, topics=[
        {"topic": "t", "partitions": [{"partition": 1, "fetch_offset": 0, "partition_max_bytes": 1000}]}],
        forgotten_topics_data=[])
    assert decide(ApiKey.FETCH, 12, request, Directory()) is None


def test_group_requests_for_a_group_coordinated_elsewhere_get_not_coordinator() -> None:
    join = body(ApiKey.JOIN_GROUP, 7, group_id="theirs", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                member_id="", protocol_type="consumer", protocols=[])
    decision = decide(ApiKey.JOIN_GROUP, 7, join, Directory())
    assert isinstance(decision, Refuse) and decision.body["error_code"] == NOT_COORDINATOR
    encode_response(ApiKey.JOIN_GROUP, 7, 1, decision.body)
    heartbeat = body(ApiKey.HEARTBEAT, 4, group_id="mine", generation_id=1, member_id="m")
    assert decide(ApiKey.HEARTBEAT, 4, heartbeat, Directory()) is None
    commit = body(ApiKey.OFFSET_COMMIT, 8, group_id="theirs", generation_id_or_member_epoch=-1, member_id="",
                  topics=[{"name": "t", "partitions": [{"partition_index": 2, "committed_offset": 5}]}])
    refused = decide(ApiKey.OFFSET_COMMIT, 8, commit, Directory())
    assert isinstance(refused, Refuse)
    assert refused.body["topics"][0]["partitions"][0]["error_code"] == NOT_COORDINATOR
    encode_response(ApiKey.OFFSET_COMMIT, 8, 1, refused.body)


def test_requests_naming_several_groups_are_narrowed_to_the_ones_coordinated_here() -> None:
    describe = body(ApiKey.DESCRIBE_GROUPS, 5, groups=["mine-a", "theirs", "mine-b"])
    decision = decide(ApiKey.DESCRIBE_GROUPS, 5, describe, Directory())
    assert isinstance(decision, Narrow) and list(decision.body.groups) == ["mine-a", "mine-b"]
    assert decision.amend is not None
    answer = decision.amend(Container(throttle_time_ms=0, groups=[]))
    assert [(g["group_id"], g["error_code"]) for g in answer["groups"]] == [("theirs", NOT_COORDINATOR)]
    encode_response(ApiKey.DESCRIBE_GROUPS, 5, 1, answer)
    fetch = body(ApiKey.OFFSET_FETCH, 8, groups=[{"group_id": "theirs", "topics": None}], require_stable=False)
    refused = decide(ApiKey.OFFSET_FETCH, 8, fetch, Directory())
    assert isinstance(refused, Refuse) and refused.body["groups"][0]["error_code"] == NOT_COORDINATOR
    encode_response(ApiKey.OFFSET_FETCH, 8, 1, refused.body)
    old = body(ApiKey.OFFSET_FETCH, 5, group_id="theirs", topics=None)
    refused = decide(ApiKey.OFFSET_FETCH, 5, old, Directory())
    assert isinstance(refused, Refuse) and refused.body["error_code"] == NOT_COORDINATOR
    delete = body(ApiKey.DELETE_GROUPS, 2, groups_names=["theirs"])
    refused = decide(ApiKey.DELETE_GROUPS, 2, delete, Directory())
    assert isinstance(refused, Refuse) and refused.body["results"][0]["error_code"] == NOT_COORDINATOR
    encode_response(ApiKey.DELETE_GROUPS, 2, 1, refused.body)


def test_list_groups_is_answered_by_every_node_for_its_own_groups() -> None:
    assert decide(ApiKey.LIST_GROUPS, 4, body(ApiKey.LIST_GROUPS, 4, states_filter=[]), Directory()) is None


def test_the_coordinator_partition_is_kafkas() -> None:
    assert partition_for("mine", 50) == partition_for("mine", 50)


# ---------------------------------------------------------------------- transactions


def test_transaction_requests_for_ids_coordinated_elsewhere_get_not_coordinator() -> None:
    cases = [
        (ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": "{}", "transaction_timeout_ms": 60000,
                                      "producer_id": -1, "producer_epoch": -1}),
        (ApiKey.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": "{}", "producer_id": 7, "producer_epoch": 0,
                                        "group_id": "g"}),
        (ApiKey.END_TXN, 3, {"transactional_id": "{}", "producer_id": 7, "producer_epoch": 0, "committed": True}),
    ]
    for api, version, fields in cases:
        theirs = decide(api, version, body(api, version, **{k: v.format("theirs") if isinstance(v, str) and
                                                             k == "transactional_id" else v
                                                             for k, v in fields.items()}), Directory())
        assert isinstance(theirs, Refuse), api
        assert theirs.body["error_code"] == NOT_COORDINATOR
        encode_response(api, version, 1, theirs.body)
        mine = body(api, version, **{k: v.format("mine") if k == "transactional_id" else v
                                     for k, v in fields.items()})
        assert decide(api, version, mine, Directory()) is None, api


def test_an_idempotent_producers_init_producer_id_is_served_by_any_node() -> None:
    request = body(ApiKey.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout_ms=60000,
                   producer_id=-1, producer_epoch=-1)
    assert decide(ApiKey.INIT_PRODUCER_ID, 4, request, Directory()) is None


def test_add_partitions_to_txn_elsewhere_answers_not_coordinator_for_every_partition() -> None:
    request = body(ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id="theirs",
                   v3_and_below_producer_id=7, v3_and_below_producer_epoch=0,
                   v3_and_below_topics=[{"name": "t", "partitions": [0, 1]}])
    decision = decide(ApiKey.ADD_PARTITIONS_TO_TXN, 3, request, Directory())
    assert isinstance(decision, Refuse)
    (topic,) = decision.body["results_by_topic_v3_and_below"]
    assert [(r["partition_index"], r["partition_error_code"]) for r in topic["results_by_partition"]] == [
        (0, NOT_COORDINATOR), (1, NOT_COORDINATOR)]
    encode_response(ApiKey.ADD_PARTITIONS_TO_TXN, 3, 1, decision.body)


def test_describe_transactions_is_narrowed_to_the_ids_coordinated_here() -> None:
    request = body(ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=["mine-1", "theirs"])
    decision = decide(ApiKey.DESCRIBE_TRANSACTIONS, 0, request, Directory())
    assert isinstance(decision, Narrow)
    assert list(decision.body.transactional_ids) == ["mine-1"]
    assert decision.amend is not None
    answer = decision.amend(Container(throttle_time_ms=0, transaction_states=[]))
    assert [(t["transactional_id"], t["error_code"]) for t in answer["transaction_states"]] == [
        ("theirs", NOT_COORDINATOR)]
    encode_response(ApiKey.DESCRIBE_TRANSACTIONS, 0, 1, answer)


# ---------------------------------------------------------------------- OffsetForLeaderEpoch


def _epochs_request(version: int, *parts: tuple[str, int, int]) -> Any:
    """OffsetForLeaderEpoch for (topic, partition, current leader epoch), each asking epoch 3."""
    by_topic: dict[str, list[dict[str, int]]] = {}
    for topic, partition, current in parts:
        by_topic.setdefault(topic, []).append(
            {"partition": partition, "current_leader_epoch": current, "leader_epoch": 3})
    return body(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, replica_id=-1,
                topics=[{"topic": t, "partitions": p} for t, p in by_topic.items()])


def test_offset_for_leader_epoch_is_narrowed_to_the_partitions_led_here() -> None:
    request = _epochs_request(4, ("t", 0, 10), ("t", 1, 20))
    decision = decide(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, request, Directory())
    assert isinstance(decision, Narrow) and decision.amend is not None
    assert [p.partition for p in decision.body.topics[0].partitions] == [0]
    served = Container(throttle_time_ms=0, topics=[Container(topic="t", partitions=[
        Container(error_code=0, partition=0, leader_epoch=3, end_offset=42)])])
    answer = decision.amend(served)
    parts = answer["topics"][0]["partitions"]
    assert [(p["partition"], p["error_code"], p["end_offset"]) for p in parts] == [(0, 0, 42), (1, NOT_LEADER, -1)]
    encode_response(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, 1, answer)


def test_offset_for_leader_epoch_checks_the_current_leader_epoch() -> None:
    for current, error in ((9, FENCED), (11, UNKNOWN_EPOCH)):
        request = _epochs_request(3, ("t", 0, current))
        decision = decide(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, request, Directory())
        assert isinstance(decision, Refuse)
        part = decision.body["topics"][0]["partitions"][0]
        assert (part["error_code"], part["leader_epoch"], part["end_offset"]) == (error, -1, -1)
        encode_response(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, 1, decision.body)
    assert decide(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, _epochs_request(3, ("t", 0, 10)), Directory()) is None
    assert decide(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, _epochs_request(3, ("t", 0, -1)), Directory()) is None


def test_offset_for_leader_epoch_v1_is_not_fenced_and_unknown_topics_pass() -> None:
    """v0-v1 carry no current epoch; a topic the cluster does not know is the handler's to refuse."""
    request = body(ApiKey.OFFSET_FOR_LEADER_EPOCH, 1, topics=[
        {"topic": "t", "partitions": [{"partition": 0, "leader_epoch": 3}]},
        {"topic": "unknown", "partitions": [{"partition": 5, "leader_epoch": 3}]}])
    assert decide(ApiKey.OFFSET_FOR_LEADER_EPOCH, 1, request, Directory()) is None
    refused = decide(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, body(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, topics=[
        {"topic": "t", "partitions": [{"partition": 2, "leader_epoch": 3}]}]), Directory())
    assert isinstance(refused, Refuse)
    encode_response(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 1, refused.body)
