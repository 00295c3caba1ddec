"""A random walk through a KIP-848 consumer group: members join, heartbeat, change their
subscriptions, leave, restart as static members, go silent; topics are created and grow;
the clock runs. After every step:

- no partition is owned by two members, as the clients see it and as the coordinator does;
- a target assignment at the group epoch is complete and balanced by the uniform
  assignor's definition;
- the coordinator's state equals the replay of the records it wrote.
"""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from broker.coordinator import GroupCoordinatorShard
from broker.coordinator.config import CoordinatorConfig
from broker.coordinator.modern.consumer.group import ConsumerGroup
from broker.coordinator.modern.topics import StaticImage
from tests.coordinator.harness import ConsumerClient, Harness, IdCounter

TOPICS = ["a", "b", "c"]
NAMES = [f"m{i}" for i in range(5)]
subscriptions = st.sets(st.sampled_from(TOPICS), min_size=1).map(sorted)


class ConsumerGroupMachine(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.h = Harness(CoordinatorConfig(consumer_session_timeout_ms=6_000, consumer_heartbeat_interval_ms=1_000))
        self.image = StaticImage.of({"a": 3, "b": 2})
        self.h.coord.topics = self.image
        self.clients: dict[str, ConsumerClient] = {}
        self.incarnation = 0

    # ------------------------------------------------------------------ rules

    @rule(name=st.sampled_from(NAMES), topics=subscriptions, static=st.booleans())
    def join(self, name: str, topics: list[str], static: bool) -> None:
        if name in self.clients:
            return
        self.incarnation += 1
        self.clients[name] = ConsumerClient(self.h, "g", f"{name}-{self.incarnation}", topics=topics,
                                            instance=name if static else None, rebalance=4_000)
        self.clients[name].heartbeat()

    @rule(name=st.sampled_from(NAMES))
    def heartbeat(self, name: str) -> None:
        if name in self.clients:
            self.clients[name].heartbeat()

    @rule()
    def everyone_heartbeats(self) -> None:
        for c in list(self.clients.values()):
            c.heartbeat()

    @rule(name=st.sampled_from(NAMES), topics=subscriptions)
    def resubscribe(self, name: str, topics: list[str]) -> None:
        c = self.clients.get(name)
        if c is not None and c.epoch > 0:
            c.topics = topics
            c.heartbeat(full=True)

    @rule(name=st.sampled_from(NAMES))
    def leave(self, name: str) -> None:
        c = self.clients.pop(name, None)
        if c is not None:
            c.leave()

    @rule(name=st.sampled_from(NAMES))
    def restart_static(self, name: str) -> None:
        """A static member steps out (-2) and comes back at once under a new member id."""
        c = self.clients.get(name)
        if c is None or c.instance is None or c.epoch <= 0:
            return
        c.leave(static=True)
        self.incarnation += 1
        fresh = ConsumerClient(self.h, "g", f"{name}-{self.incarnation}", topics=c.topics,
                               instance=c.instance, rebalance=c.rebalance)
        self.clients[name] = fresh
        fresh.heartbeat()

    @rule(name=st.sampled_from(NAMES))
    def crash(self, name: str) -> None:
        """The client vanishes without a word; its session timeout must fence it."""
        self.clients.pop(name, None)

    @rule(topic=st.sampled_from(TOPICS), extra=st.integers(1, 3))
    def grow_topic(self, topic: str, extra: int) -> None:
        current = self.image.topics.get(topic)
        self.image.set_partitions(topic, (current.num_partitions if current else 0) + extra)

    @rule(seconds=st.integers(1, 8))
    def time_passes(self, seconds: int) -> None:
        """Time runs; live clients heartbeat every second as real ones do, crashed ones are silent."""
        for _ in range(seconds):
            self.h.advance(1_000)
            for c in list(self.clients.values()):
                c.heartbeat()

    # ------------------------------------------------------------------ invariants

    def group(self) -> ConsumerGroup | None:
        g = self.h.coord.groups.get("g")
        return g if isinstance(g, ConsumerGroup) else None

    @invariant()
    def no_partition_has_two_owners(self) -> None:
        seen: dict[tuple[uuid.UUID, int], str] = {}
        for c in self.clients.values():
            for tp in c.owned:
                assert tp not in seen, f"clients {seen[tp]} and {c.member_id} both hold {tp}"
                seen[tp] = c.member_id
        g = self.group()
        if g is not None:
            owners = g.owner_of()
            assert set(owners) == set(g.partition_epochs)

    @invariant()
    def the_target_is_complete_and_balanced(self) -> None:
        g = self.group()
        if g is None or not g.members or g.assignment_epoch != g.group_epoch:
            return
        ids = {name: meta.topic_id for name, meta in g.subscription_metadata.items()}
        counts = {m: sum(len(ps) for ps in g.target_assignment.get(m, {}).values()) for m in g.members}
        owners: dict[tuple[uuid.UUID, int], str] = {}
        for member_id, member in g.members.items():
            subscribed = {ids[n] for n in member.subscribed_topic_names if n in ids}
            for topic_id, partitions in g.target_assignment.get(member_id, {}).items():
                assert topic_id in subscribed
                for p in partitions:
                    assert (topic_id, p) not in owners
                    owners[(topic_id, p)] = member_id
                for other_id, other in g.members.items():
                    if any(ids.get(n) == topic_id for n in other.subscribed_topic_names):
                        assert counts[member_id] - counts[other_id] <= 1, counts
        expected = {(meta.topic_id, p) for meta in g.subscription_metadata.values()
                    for p in range(meta.num_partitions)}
        assert set(owners) == expected

    @invariant()
    def state_equals_replay_of_records(self) -> None:
        fresh = GroupCoordinatorShard(self.h.config, new_id=IdCounter())
        for key, value in self.h.records:
            fresh.replay_bytes(key, value)
        live, loaded = self.group(), fresh.groups.get("g")
        if live is None:
            assert not isinstance(loaded, ConsumerGroup)
            return
        assert isinstance(loaded, ConsumerGroup)
        summary = self._summary
        assert summary(loaded) == summary(live)

    @staticmethod
    def _summary(g: ConsumerGroup) -> dict[str, Any]:
        return {
            "epochs": (g.group_epoch, g.assignment_epoch),
            "members": dict(g.members),
            "targets": {m: dict(a) for m, a in g.target_assignment.items()},
            "subscription": dict(g.subscription_metadata),
            "owners": dict(g.partition_epochs),
            "statics": dict(g.static_members),
        }

    def teardown(self) -> None:
        h = getattr(self, "h", None)
        if h is None:
            return
        # Everyone still here heartbeats, past every session and rebalance timeout, until the
        # group settles: crashed members are fenced and all partitions are assigned.
        for _ in range(12):
            h.advance(1_000)
            for c in list(self.clients.values()):
                c.heartbeat()
        g = self.group()
        if g is not None and self.clients:
            assert g.state.wire_name == "Stable", g.state


TestConsumerGroupMachine = ConsumerGroupMachine.TestCase
TestConsumerGroupMachine.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
