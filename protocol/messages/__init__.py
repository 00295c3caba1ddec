"""Every message kcoord speaks, indexed by API key."""

from __future__ import annotations

from protocol.messages.alter_configs import AlterConfigsRequest, AlterConfigsResponse
from protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from protocol.messages.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from protocol.messages.create_partitions import CreatePartitionsRequest, CreatePartitionsResponse
from protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from protocol.messages.delete_records import DeleteRecordsRequest, DeleteRecordsResponse
from protocol.messages.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from protocol.messages.describe_configs import DescribeConfigsRequest, DescribeConfigsResponse
from protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from protocol.messages.fetch import FetchRequest, FetchResponse
from protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from protocol.messages.headers import RequestHeader, ResponseHeader
from protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from protocol.messages.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from protocol.messages.metadata import MetadataRequest, MetadataResponse
from protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from protocol.messages.produce import ProduceRequest, ProduceResponse
from protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from protocol.messages.create_acls import CreateAclsRequest, CreateAclsResponse
from protocol.messages.describe_acls import DescribeAclsRequest, DescribeAclsResponse
from protocol.messages.delete_acls import DeleteAclsRequest, DeleteAclsResponse
from protocol.messages.describe_user_scram_credentials import DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse
from protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse
from protocol.messages.describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
from protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from protocol.messages.write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from protocol.messages.txn_offset_commit import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from protocol.messages.describe_producers import DescribeProducersRequest, DescribeProducersResponse
from protocol.messages.describe_transactions import DescribeTransactionsRequest, DescribeTransactionsResponse
from protocol.messages.list_transactions import ListTransactionsRequest, ListTransactionsResponse
from protocol.schema import Message

PAIRS: tuple[tuple[Message, Message], ...] = (
    (ProduceRequest, ProduceResponse),
    (FetchRequest, FetchResponse),
    (ListOffsetsRequest, ListOffsetsResponse),
    (MetadataRequest, MetadataResponse),
    (OffsetCommitRequest, OffsetCommitResponse),
    (OffsetFetchRequest, OffsetFetchResponse),
    (FindCoordinatorRequest, FindCoordinatorResponse),
    (JoinGroupRequest, JoinGroupResponse),
    (HeartbeatRequest, HeartbeatResponse),
    (LeaveGroupRequest, LeaveGroupResponse),
    (SyncGroupRequest, SyncGroupResponse),
    (DescribeGroupsRequest, DescribeGroupsResponse),
    (ListGroupsRequest, ListGroupsResponse),
    (ApiVersionsRequest, ApiVersionsResponse),
    (CreateTopicsRequest, CreateTopicsResponse),
    (DeleteTopicsRequest, DeleteTopicsResponse),
    (DeleteRecordsRequest, DeleteRecordsResponse),
    (InitProducerIdRequest, InitProducerIdResponse),
    (CreatePartitionsRequest, CreatePartitionsResponse),
    (DeleteGroupsRequest, DeleteGroupsResponse),
    (OffsetDeleteRequest, OffsetDeleteResponse),
    (ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse),
    (ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse),
    (SaslHandshakeRequest, SaslHandshakeResponse),
    (SaslAuthenticateRequest, SaslAuthenticateResponse),
    (CreateAclsRequest, CreateAclsResponse),
    (DescribeAclsRequest, DescribeAclsResponse),
    (DeleteAclsRequest, DeleteAclsResponse),
    (DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse),
    (AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse),
    (DescribeClusterRequest, DescribeClusterResponse),
    (DescribeConfigsRequest, DescribeConfigsResponse),
    (AlterConfigsRequest, AlterConfigsResponse),
    (IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse),
    (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse),
    (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
    (EndTxnRequest, EndTxnResponse),
    (WriteTxnMarkersRequest, WriteTxnMarkersResponse),
    (TxnOffsetCommitRequest, TxnOffsetCommitResponse),
    (DescribeProducersRequest, DescribeProducersResponse),
    (DescribeTransactionsRequest, DescribeTransactionsResponse),
    (ListTransactionsRequest, ListTransactionsResponse),
    (OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse),
)

REQUESTS: dict[int, Message] = {req.api_key: req for req, _ in PAIRS if req.api_key is not None}
RESPONSES: dict[int, Message] = {resp.api_key: resp for _, resp in PAIRS if resp.api_key is not None}

__all__ = [
    "PAIRS",
    "REQUESTS",
    "RESPONSES",
    "RequestHeader",
    "ResponseHeader",
    "ConsumerProtocolSubscription",
    "ConsumerProtocolAssignment",
] + [m.name for pair in PAIRS for m in pair]
