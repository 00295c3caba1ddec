"""FindCoordinator on a cluster node: groups and transactional ids go where the placement
puts them (the leaders of their ``__consumer_offsets`` and ``__transaction_state``
partitions); a single node coordinates both itself."""

from __future__ import annotations

from typing import Any

from broker.config import Config
from broker.context import BrokerContext
from broker.handlers.cluster import handle_find_coordinator
from broker.placement import SINGLE_NODE, BrokerEndpoint, Coordinator, PartitionPlacement
from protocol.api_keys import ApiKey
from protocol.codec import Request, decode_request, encode_request
from protocol.errors import ErrorCode
from protocol.messages import REQUESTS

GROUP, TRANSACTION = 0, 1
OTHER = BrokerEndpoint(2, "10.0.0.2", 9092)
THIRD = BrokerEndpoint(3, "10.0.0.3", 9092)


class ElsewherePlacement:
    """A cluster whose node 2 coordinates every group."""

    def brokers(self, listener: str, me: BrokerEndpoint) -> list[BrokerEndpoint]:
        return [me, OTHER]

    def controller_id(self, me: BrokerEndpoint) -> int:
        return OTHER.node_id

    def partition(self, topic: str, index: int, me: BrokerEndpoint) -> PartitionPlacement:
        return PartitionPlacement(OTHER.node_id, 1, (OTHER.node_id,), (OTHER.node_id,))

    def group_coordinator(self, group_id: str, listener: str, me: BrokerEndpoint) -> Coordinator:
        return Coordinator(OTHER)

    def transaction_coordinator(self, transactional_id: str, listener: str, me: BrokerEndpoint) -> Coordinator:
        return Coordinator(THIRD)


class NoLeaderPlacement(ElsewherePlacement):
    """A cluster whose transaction partitions have no live leader."""

    def transaction_coordinator(self, transactional_id: str, listener: str, me: BrokerEndpoint) -> Coordinator:
        return Coordinator(None, ErrorCode.COORDINATOR_NOT_AVAILABLE)


def _request(key_type: int) -> Request:
    fields = {"key_type": key_type, "coordinator_keys": ["k"]}
    return decode_request(encode_request(ApiKey.FIND_COORDINATOR, 4, 1, fields)[4:],
                          {ApiKey.FIND_COORDINATOR: REQUESTS[ApiKey.FIND_COORDINATOR]})


def _answer(placement: Any, key_type: int) -> dict[str, Any]:
    ctx = BrokerContext(Config(), 1, "127.0.0.1", 9092, "cluster", placement=placement)
    (answer,) = handle_find_coordinator(ctx, _request(key_type))["coordinators"]
    return answer  # type: ignore[no-any-return]


def test_a_cluster_node_names_the_groups_and_the_transactional_ids_coordinators() -> None:
    group = _answer(ElsewherePlacement(), GROUP)
    assert (group["error_code"], group["node_id"], group["host"]) == (0, 2, "10.0.0.2")
    txn = _answer(ElsewherePlacement(), TRANSACTION)
    assert (txn["error_code"], txn["node_id"], txn["host"]) == (0, 3, "10.0.0.3")


def test_a_transactional_id_whose_partition_has_no_leader_gets_coordinator_not_available() -> None:
    txn = _answer(NoLeaderPlacement(), TRANSACTION)
    assert (txn["error_code"], txn["node_id"]) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)


def test_a_single_node_coordinates_groups_and_transactional_ids_itself() -> None:
    for key_type in (GROUP, TRANSACTION):
        answer = _answer(SINGLE_NODE, key_type)
        assert (answer["error_code"], answer["node_id"], answer["port"]) == (0, 1, 9092)


def test_the_first_transactional_lookup_in_a_cluster_asks_for_the_transaction_topic() -> None:
    from cluster.model import ClusterImage, Keys
    from cluster.view import ClusterPlacement

    asked: list[bool] = []
    placement = ClusterPlacement(ClusterImage(Keys("test")), 50, 50, lambda: asked.append(True))
    txn = _answer(placement, TRANSACTION)
    assert (txn["error_code"], txn["node_id"]) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)
    assert asked == [True]
    _answer(placement, GROUP)
    assert asked == [True]  # a group lookup never creates it
