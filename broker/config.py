"""Broker configuration: Kafka's config names, Kafka's defaults, validated at start-up.

Values come from a TOML file (``--config``) and ``--set name=value`` (which wins). An
unknown name or a bad value is a ``ConfigError`` naming the key, raised before the
broker binds a socket.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A configuration problem, with a message that names the key."""


MAX_PORT = 65535
_LISTENER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_host_port(text: str, what: str, *, allow_any_port: bool = True,
                    allow_empty_host: bool = False) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 hosts in brackets) checked at configuration time.

    ``what`` names the option in the error. Port 0 ("any free port") is allowed only for
    addresses the broker binds (``allow_any_port``); a port above 65535 is always an
    error, rather than the silent wrap-around the socket layer would do.
    """
    host, sep, port = text.rpartition(":")
    host = host.strip("[]") if host.startswith("[") and host.endswith("]") else host
    if not sep or not (host or allow_empty_host) or not port.isdigit():
        raise ConfigError(f"{what} {text!r}: expected HOST:PORT")
    number = int(port)
    lowest = 0 if allow_any_port else 1
    if not lowest <= number <= MAX_PORT:
        raise ConfigError(f"{what} {text!r}: port {number} is not between {lowest} and {MAX_PORT}")
    return host, number


def parse_listeners(text: str, what: str, *, allow_any_port: bool = False) -> list[tuple[str, str, int]]:
    """Kafka's listener list ``NAME://HOST:PORT[,NAME://HOST:PORT...]`` as (name, host, port).

    Names are upper-cased, as Kafka's listener names are matched. Port 0 is allowed only for
    addresses the broker binds (``listeners``), not for addresses it advertises.
    """
    found = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, address = item.partition("://")
        if not sep or not _LISTENER_NAME.fullmatch(name):
            raise ConfigError(f"{what}: {item!r} is not NAME://HOST:PORT (for example PLAINTEXT://localhost:9092)")
        # A listener to bind may leave its host empty (every interface), as Kafka's may.
        host, port = parse_host_port(address, what, allow_any_port=allow_any_port, allow_empty_host=allow_any_port)
        found.append((name.upper(), host, port))
    return found


@dataclass(frozen=True)
class Setting:
    name: str
    kind: type  # int, bool, str, float
    default: Any  # None: unset unless given (as Kafka's log.retention.ms)
    doc: str
    check: Callable[[Any], bool] | None = None
    rule: str = ""


def _positive(v: int) -> bool:
    return v > 0


def _non_negative(v: int) -> bool:
    return v >= 0


def _one_of(*choices: str) -> Callable[[Any], bool]:
    return lambda v: v in choices


def _list_of(*choices: str) -> Callable[[Any], bool]:
    return lambda v: bool(v.strip()) and all(item.strip() in choices for item in v.split(","))


def _level(default: int, low: int, high: int) -> Callable[[Any], bool]:
    return lambda v: v == default or low <= v <= high


INT32_MAX = 2147483647
INT64_MAX = 2**63 - 1

SETTINGS: tuple[Setting, ...] = (
    Setting("node.id", int, 0, "The id this broker advertises in Metadata and FindCoordinator.",
            _non_negative, ">= 0"),
    Setting("cluster.id", str, "kcoord-cluster", "The cluster id returned in Metadata."),
    Setting("listeners", str, "",
            "Comma-separated NAME://host:port listeners (port 0: any free port); each name's security "
            "protocol comes from listener.security.protocol.map. Empty: one PLAINTEXT listener on the "
            "--listen address."),
    Setting("advertised.listeners", str, "",
            "NAME://host:port per listener, the address Metadata and FindCoordinator give clients that "
            "connected to that listener; a listener not named here advertises its bound address."),
    Setting("listener.security.protocol.map", str,
            "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
            "Listener name to security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)."),
    Setting("max.connections.per.ip", int, INT32_MAX,
            "Most connections one client address may hold open at once; more are closed at accept.",
            _non_negative, ">= 0"),
    Setting("max.connections.per.ip.overrides", str, "",
            "Comma-separated host:count exceptions to max.connections.per.ip."),
    Setting("ssl.keystore.type", str, "PEM", "Only PEM (KIP-651).", _one_of("PEM"), "PEM"),
    Setting("ssl.keystore.location", str, "",
            "A PEM file with the broker's private key and certificate chain."),
    Setting("ssl.keystore.certificate.chain", str, "",
            "The broker's certificate chain as PEM text (instead of ssl.keystore.location)."),
    Setting("ssl.keystore.key", str, "", "The broker's private key as PEM text (with ssl.keystore.certificate.chain)."),
    Setting("ssl.key.password", str, "", "Password of an encrypted private key."),
    Setting("ssl.truststore.type", str, "PEM", "Only PEM (KIP-651).", _one_of("PEM"), "PEM"),
    Setting("ssl.truststore.location", str, "",
            "A PEM file of the CA certificates client certificates are checked against."),
    Setting("ssl.truststore.certificates", str, "", "The trusted CA certificates as PEM text."),
    Setting("ssl.client.auth", str, "none",
            "Mutual TLS on SSL listeners (not SASL_SSL ones, as KIP-684): 'required' refuses clients without a "
            "trusted certificate, "
            "'requested' asks for one, 'none' does not. The principal is the certificate's subject "
            "through ssl.principal.mapping.rules.", _one_of("none", "requested", "required"),
            "one of none, requested, required"),
    Setting("ssl.principal.mapping.rules", str, "DEFAULT",
            "How a client certificate's distinguished name becomes a principal: DEFAULT (the name as is) "
            "or RULE:pattern/replacement/[LU], comma-separated, first match wins."),
    Setting("ssl.enabled.protocols", str, "TLSv1.2,TLSv1.3", "TLS versions accepted (TLSv1.2 and TLSv1.3 only).",
            lambda v: bool(v) and all(p.strip() in ("TLSv1.2", "TLSv1.3") for p in v.split(",")),
            "TLSv1.2 and/or TLSv1.3"),
    Setting("sasl.enabled.mechanisms", str, "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "SASL mechanisms offered on SASL listeners (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512). PLAIN checks "
            "the password against the user's SCRAM credential.",
            lambda v: bool(v) and all(m.strip() in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
                                      for m in v.split(",")),
            "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    Setting("sasl.server.max.receive.size", int, 524288,
            "Largest frame accepted before a SASL connection has authenticated.", _positive, "> 0"),
    Setting("connections.max.reauth.ms", int, 0,
            "KIP-368: SASL sessions last this long; clients re-authenticate on the same connection before, "
            "and a request after expiry closes it. 0: sessions do not expire.", _non_negative, ">= 0"),
    Setting("connection.failed.authentication.delay.ms", int, 100,
            "How long a failed login waits before its error is sent and the connection closed.",
            _non_negative, ">= 0"),
    Setting("authorizer.class.name", str, "",
            "Empty: no authorization (everyone may do everything). "
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer: ACLs are enforced on every API.",
            _one_of("", "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                    "kafka.security.authorizer.AclAuthorizer"),
            "empty or org.apache.kafka.metadata.authorizer.StandardAuthorizer"),
    Setting("super.users", str, "", "Semicolon-separated principals (User:admin) allowed everything."),
    Setting("allow.everyone.if.no.acl.found", bool, False,
            "With the authorizer on: a resource no ACL mentions is open to everyone."),
    Setting("scram.credentials.bootstrap.file", str, "",
            "kcoord-specific: a file of lines MECHANISM=[name=USER,password=PASSWORD] (kafka-storage's "
            "--add-scram syntax); at start-up each user without a credential for that mechanism gets one. "
            "The password is salted before it is stored; the file is only read."),
    Setting("socket.request.max.bytes", int, 104857600,
            "Largest request frame accepted; a larger size prefix closes the connection.",
            _positive, "> 0"),
    Setting("group.initial.rebalance.delay.ms", int, 3000,
            "How long a new group waits for more members before its first rebalance.",
            _non_negative, ">= 0"),
    Setting("group.min.session.timeout.ms", int, 6000, "Smallest session timeout a member may ask for.",
            _non_negative, ">= 0"),
    Setting("group.max.session.timeout.ms", int, 1800000, "Largest session timeout a member may ask for.",
            _non_negative, ">= 0"),
    Setting("group.max.size", int, INT32_MAX, "Most members one consumer group may have (KIP-389).",
            _positive, "> 0"),
    Setting("group.new.partitions.start", str, "earliest",
            "kcoord-specific: when CreatePartitions grows a topic, 'earliest' commits each new "
            "partition's log start offset for every group whose live members subscribe to the topic "
            "(offsets already committed are kept), so consumers with auto.offset.reset=latest do not "
            "skip the first records written there; 'latest' commits nothing and leaves the new "
            "partitions to the client's auto.offset.reset, as Kafka does.",
            _one_of("earliest", "latest"), "one of earliest, latest"),
    Setting("kcoord.offset.out.of.range", str, "none",
            "kcoord-specific, the default of the group config of the same name: 'nearest' moves a "
            "group's committed offset that falls out of the log into it, as a commit marked "
            "kcoord:nearest: to the new log start, durably, before retention or DeleteRecords "
            "moves the start past it; to the log end when it is beyond the end (a truncated or "
            "recreated topic). 'none' leaves it to the client's auto.offset.reset, as Kafka does.",
            _one_of("nearest", "none"), "one of nearest, none"),
    Setting("kcoord.initial.offset", str, "none",
            "kcoord-specific, the default of the group config of the same name: where a group "
            "starts on a partition it is assigned and has no offset for, committed (marked "
            "kcoord:earliest_on_start or kcoord:latest_on_start) before the SyncGroup or "
            "ConsumerGroupHeartbeat reply that assigns it: 'earliest' (log start), 'latest' (log "
            "end) or 'none' (the client's auto.offset.reset, as Kafka does).",
            _one_of("earliest", "latest", "none"), "one of earliest, latest, none"),
    Setting("group.coordinator.rebalance.protocols", str, "classic,consumer",
            "The group protocols the coordinator speaks: classic (JoinGroup/SyncGroup) and consumer "
            "(KIP-848, ConsumerGroupHeartbeat). Without consumer, its APIs are not offered.",
            lambda v: bool(v) and set(p.strip() for p in v.split(",")) <= {"classic", "consumer"}
            and "classic" in [p.strip() for p in v.split(",")],
            "a list of classic and consumer; classic is required"),
    Setting("group.consumer.session.timeout.ms", int, 45000,
            "How long a consumer-protocol member may go without a heartbeat before it is fenced (KIP-848).",
            _positive, "> 0"),
    Setting("group.consumer.min.session.timeout.ms", int, 45000,
            "Smallest group.consumer.session.timeout.ms allowed.", _positive, "> 0"),
    Setting("group.consumer.max.session.timeout.ms", int, 60000,
            "Largest group.consumer.session.timeout.ms allowed.", _positive, "> 0"),
    Setting("group.consumer.heartbeat.interval.ms", int, 5000,
            "How often consumer-protocol members are told to heartbeat (KIP-848).", _positive, "> 0"),
    Setting("group.consumer.min.heartbeat.interval.ms", int, 5000,
            "Smallest group.consumer.heartbeat.interval.ms allowed.", _positive, "> 0"),
    Setting("group.consumer.max.heartbeat.interval.ms", int, 15000,
            "Largest group.consumer.heartbeat.interval.ms allowed.", _positive, "> 0"),
    Setting("group.consumer.max.size", int, INT32_MAX,
            "Most members one consumer-protocol group may have.", _positive, "> 0"),
    Setting("group.consumer.assignors", str, "uniform,range",
            "The server-side assignors consumer groups may use (KIP-848); the first is the default. "
            "Known: uniform (balanced and sticky) and range.",
            lambda v: bool(v) and all(a.strip() in ("uniform", "range") for a in v.split(",")),
            "a list of uniform and range"),
    Setting("group.consumer.assignment.interval.ms", int, 100,
            "kcoord-specific: a consumer group's target assignment is computed at most this often; "
            "epoch bumps in between (members joining or leaving together) share one computation, "
            "made when the interval is up. 0 computes on every bump, as Kafka 4.0 does.",
            _non_negative, ">= 0"),
    Setting("group.consumer.migration.policy", str, "bidirectional",
            "Online migration between the classic and the consumer protocol: bidirectional, upgrade "
            "(classic groups may become consumer groups), downgrade (the reverse) or disabled.",
            _one_of("bidirectional", "upgrade", "downgrade", "disabled"),
            "one of bidirectional, upgrade, downgrade, disabled"),
    Setting("offsets.retention.minutes", int, 10080,
            "How long committed offsets live after their group became empty (KIP-211).",
            _positive, "> 0"),
    Setting("offsets.retention.check.interval.ms", int, 600000, "How often expired offsets are removed.",
            _positive, "> 0"),
    Setting("offset.metadata.max.bytes", int, 4096, "Largest metadata string an offset commit may carry.",
            _non_negative, ">= 0"),
    Setting("offsets.topic.num.partitions", int, 50,
            "Partitions of the coordinator log; a group's partition is hash(group) mod this.",
            _positive, "> 0"),
    Setting("offsets.topic.segment.bytes", int, 104857600, "Segment size of the coordinator log.",
            _positive, "> 0"),
    Setting("offsets.commit.timeout.ms", int, 5000,
            "How long an OffsetCommit may wait for its records to be fsynced. Past it, each partition "
            "the commit accepted is answered REQUEST_TIMED_OUT (as Kafka's GroupMetadataManager."
            "storeOffsets; clients look the coordinator up again and retry) and one refused for its own "
            "reason keeps its error; the records may still become durable later. Other coordinator "
            "replies wait until they are durable (docs/storage.md).",
            _positive, "> 0"),
    Setting("transaction.max.timeout.ms", int, 900000,
            "The longest transaction.timeout.ms a transactional producer may ask for; InitProducerId with "
            "more is refused with INVALID_TRANSACTION_TIMEOUT. A transaction open past its own timeout is "
            "aborted by the broker (docs/transactions.md).", _positive, "> 0"),
    Setting("transactional.id.expiration.ms", int, 604800000,
            "A transactional id with no transaction in flight and no update for this long is forgotten "
            "(its __transaction_state record tombstoned).", _positive, "> 0"),
    Setting("transaction.remove.expired.transaction.cleanup.interval.ms", int, 3600000,
            "How often expired transactional ids are looked for.", _positive, "> 0"),
    Setting("transaction.state.log.num.partitions", int, 50,
            "Partitions of __transaction_state; a transactional id's partition is hash(id) mod this. "
            "Fixed once the log exists.", _positive, "> 0"),
    Setting("transaction.state.log.segment.bytes", int, 104857600, "Segment size of __transaction_state.",
            _positive, "> 0"),
    Setting("transaction.state.log.replication.factor", int, 3,
            "Replicas of each __transaction_state partition in a cluster, capped at the number of live nodes "
            "when the partition is placed; the controller adds replicas as nodes join, up to this number.",
            _positive, ">= 1"),
    Setting("transaction.state.log.min.isr", int, 2,
            "The min.insync.replicas of __transaction_state in a cluster: a transaction coordinator's write is "
            "refused (NOT_COORDINATOR) while fewer replicas of its partition are in sync. A single node does "
            "not replicate it.", _positive, ">= 1"),
    Setting("producer.id.expiration.ms", int, 86400000,
            "A partition forgets an idempotent or transactional producer with no open transaction whose "
            "last batch is older than this (its sequences are then unknown).", _positive, "> 0"),
    Setting("producer.state.checkpoint.interval.ms", int, 60000,
            "kcoord-specific: how often each partition's producer state (open transactions, sequences) is "
            "checkpointed, bounding what a restart replays to rebuild it.", _positive, "> 0"),
    Setting("num.partitions", int, 1, "Partitions of an auto-created topic.", _positive, "> 0"),
    Setting("auto.create.topics.enable", bool, True,
            "Create a topic when a client asks for metadata of (or produces to) an unknown one."),
    Setting("offsets.commit.require.known.topic", bool, True,
            "kcoord-specific: refuse commits for unknown topics or partitions "
            "(UNKNOWN_TOPIC_OR_PARTITION, as Kafka does); false makes kcoord a pure offset store."),
    Setting("log.flush.policy", str, "durable",
            "'durable': fsync before acknowledging; 'os': leave flushing to the OS.",
            _one_of("durable", "os"), "one of durable, os"),
    Setting("log.segment.bytes", int, 1073741824,
            "Segment size of topic partitions; the default of a topic's segment.bytes.", lambda v: v >= 14, ">= 14"),
    Setting("log.retention.hours", int, 168,
            "How long topics with cleanup.policy=delete keep data; the default of a topic's retention.ms "
            "unless log.retention.minutes or log.retention.ms is set (negative: forever)."),
    Setting("log.retention.minutes", int, None, "As log.retention.hours, in minutes; wins over it."),
    Setting("log.retention.ms", int, None,
            "As log.retention.hours, in milliseconds; wins over both (-1: forever)."),
    Setting("log.retention.bytes", int, -1,
            "Size a partition of a topic with cleanup.policy=delete is trimmed to; the default of a topic's "
            "retention.bytes (-1: no limit)."),
    Setting("log.cleanup.policy", str, "delete", "The default cleanup.policy of topics.",
            _list_of("delete", "compact"), "delete, compact or both, comma-separated"),
    Setting("compression.type", str, "producer",
            "The default compression.type of topics: producer keeps what producers send; uncompressed, gzip, "
            "snappy, lz4 or zstd recompress every batch on the broker.",
            _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
            "one of uncompressed, zstd, lz4, snappy, gzip, producer"),
    Setting("compression.gzip.level", int, -1, "gzip level of broker-side recompression.",
            _level(-1, 1, 9), "-1 or 1-9"),
    Setting("compression.lz4.level", int, 9, "lz4 level of broker-side recompression.", _level(9, 1, 17), "1-17"),
    Setting("compression.zstd.level", int, 3, "zstd level of broker-side recompression.",
            _level(3, -131072, 22), "-131072 to 22"),
    Setting("message.max.bytes", int, 1048588,
            "Largest record batch a topic accepts (after compression); the default of a topic's "
            "max.message.bytes.", _non_negative, ">= 0"),
    Setting("log.message.timestamp.type", str, "CreateTime", "The default message.timestamp.type of topics.",
            _one_of("CreateTime", "LogAppendTime"), "CreateTime or LogAppendTime"),
    Setting("log.message.timestamp.before.max.ms", int, INT64_MAX,
            "The default message.timestamp.before.max.ms of topics.", _non_negative, ">= 0"),
    Setting("log.message.timestamp.after.max.ms", int, INT64_MAX,
            "The default message.timestamp.after.max.ms of topics.", _non_negative, ">= 0"),
    Setting("min.insync.replicas", int, 1,
            "The default min.insync.replicas of topics (and of __consumer_offsets): an acks=all produce, an "
            "offset commit or a group change is refused with NOT_ENOUGH_REPLICAS (a coordinator answers "
            "NOT_COORDINATOR for it) while fewer replicas are in sync. A single node has one replica, so "
            "above 1 it refuses every acks=all produce, as Kafka does.", _positive, ">= 1"),
    Setting("log.cleaner.enable", bool, True,
            "Compact the coordinator log in the background (latest record per key, then tombstones go)."),
    Setting("log.cleaner.backoff.ms", int, 15000, "How long the cleaner sleeps between checks.",
            _positive, "> 0"),
    Setting("log.cleaner.min.cleanable.ratio", float, 0.5,
            "Clean a partition once this share of its sealed bytes was written since its last clean.",
            lambda v: 0.0 <= v <= 1.0, "between 0 and 1"),
    Setting("log.retention.check.interval.ms", int, 300000,
            "How often topics with cleanup.policy=delete drop segments past retention.ms / retention.bytes.",
            _positive, "> 0"),
    Setting("log.history.retention.ms", int, 0,
            "Keep coordinator-log segments the cleaner rewrites in DATA_DIR/history for this long, "
            "so the pipeline sees the full commit history. 0: off (replaced segments are deleted); "
            "-1: keep forever. Costs disk: every committed offset stays on disk until it ages out.",
            lambda v: v >= -1, ">= -1"),
    Setting("delete.retention.ms", int, 86400000,
            "How long the cleaner keeps tombstones before dropping them.", _non_negative, ">= 0"),
    Setting("shutdown.grace.ms", int, 5000,
            "On SIGTERM/SIGINT, how long in-flight requests may take to finish.", _non_negative, ">= 0"),
    Setting("metrics.group.lag.max.series", int, 1000,
            "Most (group, topic) pairs in the lag metrics of /metrics; the pairs with the largest lag "
            "are kept. 0: no lag metrics.", _non_negative, ">= 0"),
    # ------------------------------------------------------------ a cluster of nodes (docs/cluster.md)
    Setting("cluster.etcd.endpoints", str, "",
            "Comma-separated etcd v3 endpoints (http://host:port). Set, this process is one node of a "
            "cluster whose membership and partition placement live in etcd (kcoord serve --cluster); "
            "empty: a single node, no etcd."),
    Setting("cluster.name", str, "kcoord",
            "The cluster's name: its keys live under /kcoord/<name>/ in etcd, so clusters may share one etcd."),
    Setting("broker.session.timeout.ms", int, 9000,
            "The node's etcd lease, rounded up to whole seconds: a node that does not renew it for this "
            "long loses its registration and every leadership, and stops serving as leader by its own "
            "clock before etcd can let another node take over.", lambda v: v >= 2000, ">= 2000"),
    Setting("broker.heartbeat.interval.ms", int, 2000, "How often a node renews its etcd lease.",
            _positive, "> 0"),
    Setting("broker.rack", str, "", "The node's rack, in Metadata and DescribeCluster."),
    Setting("inter.broker.listener.name", str, "",
            "The listener other nodes copy partitions from (Fetch as a replica); empty: the first listener. "
            "It must be a PLAINTEXT listener."),
    Setting("cluster.rebalance.enable", bool, True,
            "The controller moves partitions between live nodes until no node holds more than one more "
            "than another (after a node joins, for instance)."),
    Setting("cluster.rebalance.delay.ms", int, 3000,
            "How long the set of live nodes must stay the same before the controller rebalances.",
            _non_negative, ">= 0"),
    Setting("cluster.rebalance.max.moves", int, 4, "Most partition moves the controller has under way at once.",
            _positive, "> 0"),
    Setting("default.replication.factor", int, 1,
            "Replicas of a topic created without a replication factor (CreateTopics with -1, or "
            "auto-created). A cluster refuses more than its live nodes with INVALID_REPLICATION_FACTOR.",
            _positive, ">= 1"),
    Setting("offsets.topic.replication.factor", int, 3,
            "Replicas of each __consumer_offsets partition, capped at the number of live nodes when the "
            "partition is placed; the controller adds replicas as nodes join, up to this number.",
            _positive, ">= 1"),
    Setting("replica.lag.time.max.ms", int, 30000,
            "A follower that has not caught up with its leader's log end for this long leaves the ISR "
            "(Kafka's Partition.maybeShrinkIsr); acks=all writes wait for the ISR, so this bounds how long a "
            "dead follower holds them up.", _positive, "> 0"),
    Setting("replica.high.watermark.checkpoint.interval.ms", int, 5000,
            "How often a cluster node saves the high watermark of every replicated partition it holds to "
            "replication-offset-checkpoint (also saved at a clean stop); a restarted replica starts its high "
            "watermark at the smaller of the saved one and its log end.", _positive, "> 0"),
    Setting("auto.leader.rebalance.enable", bool, True,
            "A leader that is not its partition's preferred replica (the first one) hands the partition "
            "back to it once that replica is alive and in the ISR, so leadership spreads over the nodes."),
    Setting("unclean.leader.election.enable", bool, False,
            "When no in-sync replica of a partition is alive, let an out-of-sync one lead (losing what only "
            "the ISR had); the default of a topic's unclean.leader.election.enable."),
    Setting("cluster.handover.timeout.ms", int, 10000,
            "How long a leader handing a partition over stops taking writes for it, waiting for the new "
            "replica to fetch the last of the log, before it serves the partition again and retries later.",
            _positive, "> 0"),
)

_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


def _coerce(setting: Setting, raw: Any) -> Any:
    """Turn a TOML value or a --set string into the setting's type."""
    name = setting.name
    if setting.kind is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("true", "false"):
            return raw.lower() == "true"
        raise ConfigError(f"{name}: expected true or false, got {raw!r}")
    if setting.kind is float:
        if isinstance(raw, bool):
            raise ConfigError(f"{name}: expected a number, got {raw!r}")
        if isinstance(raw, (int, float)):
            return float(raw)
        if isinstance(raw, str):
            try:
                return float(raw.strip())
            except ValueError:
                pass
        raise ConfigError(f"{name}: expected a number, got {raw!r}")
    if setting.kind is int:
        if isinstance(raw, bool):
            raise ConfigError(f"{name}: expected an integer, got {raw!r}")
        if isinstance(raw, int):
            return raw
        if isinstance(raw, str):
            try:
                return int(raw.strip(), 10)
            except ValueError:
                pass
        raise ConfigError(f"{name}: expected an integer, got {raw!r}")
    if not isinstance(raw, str):
        raise ConfigError(f"{name}: expected a string, got {raw!r}")
    return raw


class Config(Mapping[str, Any]):
    """A complete, validated configuration: every known key, with defaults filled in."""

    def __init__(self, overrides: Mapping[str, Any] | None = None) -> None:
        values = {s.name: s.default for s in SETTINGS}
        #: The keys the operator set (in the file or with --set), as opposed to defaults.
        self.explicit = frozenset((overrides or {}).keys())
        for name, raw in (overrides or {}).items():
            setting = _BY_NAME.get(name)
            if setting is None:
                raise ConfigError(f"{name}: unknown configuration key")
            value = _coerce(setting, raw)
            if setting.check is not None and not setting.check(value):
                raise ConfigError(f"{name}: {value!r} is out of range ({setting.rule})")
            values[name] = value
        lo = values["group.min.session.timeout.ms"]
        hi = values["group.max.session.timeout.ms"]
        if lo > hi:
            raise ConfigError(
                f"group.min.session.timeout.ms: {lo} is above group.max.session.timeout.ms={hi}"
            )
        for kind in ("session.timeout", "heartbeat.interval"):
            name = f"group.consumer.{kind}.ms"
            low, high = values[f"group.consumer.min.{kind}.ms"], values[f"group.consumer.max.{kind}.ms"]
            if not low <= values[name] <= high:
                raise ConfigError(f"{name}: {values[name]} is outside [{low}, {high}] "
                                  f"(group.consumer.min.{kind}.ms, group.consumer.max.{kind}.ms)")
        if values["group.consumer.heartbeat.interval.ms"] >= values["group.consumer.session.timeout.ms"]:
            raise ConfigError("group.consumer.heartbeat.interval.ms must be lower than "
                              "group.consumer.session.timeout.ms")
        if values["broker.heartbeat.interval.ms"] >= values["broker.session.timeout.ms"]:
            raise ConfigError("broker.heartbeat.interval.ms must be lower than broker.session.timeout.ms")
        if values["listeners"]:
            parse_listeners(values["listeners"], "listeners", allow_any_port=True)
        if values["advertised.listeners"]:
            parse_listeners(values["advertised.listeners"], "advertised.listeners")
        self._values = values

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Any:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """TOML may nest dotted keys ([group] max.size = 3); flatten back to Kafka names."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def parse_set_option(item: str) -> tuple[str, str]:
    """One ``--set name=value``."""
    name, sep, value = item.partition("=")
    if not sep or not name.strip():
        raise ConfigError(f"--set {item!r}: expected name=value")
    return name.strip(), value


def load_config(path: Path | None = None, sets: Iterable[str] = ()) -> Config:
    """The file's values, then each --set on top, validated together."""
    overrides: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as handle:
                overrides.update(_flatten(tomllib.load(handle)))
        except OSError as exc:
            raise ConfigError(f"--config {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"--config {path}: not valid TOML: {exc}") from None
    for item in sets:
        name, value = parse_set_option(item)
        overrides[name] = value
    return Config(overrides)


def reference_markdown() -> str:
    """The configuration reference table (docs/configuration.md embeds it verbatim)."""
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for s in SETTINGS:
        default = ("(unset)" if s.default is None else str(s.default).lower() if s.kind is bool
                   else repr(s.default) if s.kind is str else s.default)
        rule = f" ({s.rule})" if s.rule else ""
        lines.append(f"| `{s.name}` | {s.kind.__name__} | `{default}` | {s.doc}{rule} |")
    return "\n".join(lines) + "\n"


# Documents that end with the reference table: the text before the table's header row is
# kept, the table itself is regenerated (`python -m broker.config`).
REFERENCE_DOCS = ("configuration.md", "operations.md")


def write_reference_docs(docs_dir: Path) -> None:
    """Replace the table at the end of each REFERENCE_DOCS file with reference_markdown()."""
    table = reference_markdown()
    header = table.splitlines()[0]
    for name in REFERENCE_DOCS:
        path = docs_dir / name
        text = path.read_text()
        path.write_text(text[: text.index(header)] + table)


if __name__ == "__main__":
    from broker import topic_configs

    docs = Path(__file__).resolve().parents[1] / "docs"
    write_reference_docs(docs)
    topic_configs.write_reference(docs / "configuration.md")
