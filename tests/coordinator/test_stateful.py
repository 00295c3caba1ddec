"""A random walk through the coordinator: several clients (dynamic and static, old and new
versions) join, sync, heartbeat, leave, commit and let the clock run. After every step the
coordinator must be consistent with itself and with the records it wrote."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from broker.coordinator import GroupCoordinatorShard
from tests.coordinator.harness import E, Harness, IdCounter, S

GROUP = "g"
SIMPLE = "simple"

PROTOCOLS = [
    (("range", b"a"),),
    (("range", b"b"),),
    (("roundrobin", b"x"), ("range", b"a")),
    (("roundrobin", b"y"),),  # only compatible with members that list roundrobin
]


@dataclass
class Client:
    """What one consumer process believes about itself."""

    client_id: str
    instance: str | None
    version: int  # JoinGroup version
    session: int
    rebalance: int
    member_id: str = ""
    generation: int = -1
    members_view: list[str] = field(default_factory=list)  # from its last JoinGroup reply as leader

    @property
    def identity(self) -> str:
        return self.instance or self.client_id


CLIENTS = [
    ("d0", None, 3, 6_000, 10_000),
    ("d1", None, 5, 10_000, 20_000),
    ("s2", "s2", 5, 8_000, 15_000),
    ("s3", "s3", 9, 12_000, 25_000),
    ("d4", None, 7, 7_000, 30_000),
]


def identity_of(member_id: str) -> str:
    """Member ids are <instance id or client id>-<n>; every client has its own prefix."""
    return member_id.rsplit("-", 1)[0]


clients = st.integers(0, len(CLIENTS) - 1)
rarely = st.sampled_from([False, False, False, True])


class CoordinatorMachine(RuleBasedStateMachine):
    @initialize(behaved=st.lists(st.booleans(), min_size=len(CLIENTS), max_size=len(CLIENTS)))
    def start(self, behaved: list[bool]) -> None:
        self.h = Harness()
        self.clients = [Client(*c) for c in CLIENTS]
        # Well-behaved clients send SyncGroup as soon as their JoinGroup is answered.
        self.behaved = behaved
        self.requests: dict[int, tuple[str, int, Any]] = {}  # ticket -> (api, client index, extra)
        self.seen: set[int] = set()
        self.max_generation: dict[str, int] = {}
        # (group, generation) -> identity -> assignment, from the leader's SyncGroup
        self.leader_assignments: dict[tuple[str, int], dict[str, bytes]] = {}

    # ------------------------------------------------------------ reply bookkeeping

    def _absorb(self) -> None:
        """Let each client learn from its newly answered requests, in ticket order."""
        to_sync = []
        for ticket in sorted(t for t in self.requests if t in self.h.replies and t not in self.seen):
            self.seen.add(ticket)
            api, index, extra = self.requests[ticket]
            reply = self.h.replies[ticket]
            client = self.clients[index]
            error = reply["error_code"]
            if api == "join":
                if error == E.NONE:
                    client.member_id = reply["member_id"]
                    client.generation = reply["generation_id"]
                    client.members_view = [m["member_id"] for m in reply["members"]]
                    assert reply["member_id"].startswith(client.identity + "-")
                    if reply["members"]:
                        assert reply["leader"] == reply["member_id"] or reply["skip_assignment"]
                    if self.behaved[index]:
                        to_sync.append(index)
                elif error == E.MEMBER_ID_REQUIRED:
                    client.member_id = reply["member_id"]
                elif error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID, E.GROUP_MAX_SIZE_REACHED):
                    client.member_id = ""
                    client.generation = -1
            elif api == "sync" and error == E.NONE:
                member_id, generation = extra
                latest = self.leader_assignments.get((GROUP, generation))
                assert latest is not None, "a successful SyncGroup before any leader assignment"
                assert reply["assignment"] == latest.get(identity_of(member_id), b""), (
                    member_id, reply, latest)
        for index in to_sync:
            self._sync(index, 0, drop=False, stale=False)

    def _record(self, api: str, index: int, ticket: int, extra: Any = None) -> None:
        self.requests[ticket] = (api, index, extra)

    def _in_group(self, index: int) -> int:
        """Prefer a client that believes it is in the group (most real requests come from those)."""
        if self.clients[index].generation >= 0:
            return index
        inside = [i for i, c in enumerate(self.clients) if c.generation >= 0]
        return inside[index % len(inside)] if inside else index

    # ------------------------------------------------------------ rules

    def _join(self, index: int, member_id: str, protocols: tuple) -> int:
        c = self.clients[index]
        t = self.h.join(GROUP, member_id, version=c.version, instance=c.instance, session=c.session,
                        rebalance=c.rebalance, protocols=protocols, client_id=c.client_id)
        self._record("join", index, t)
        self._absorb()
        return t

    @rule(index=clients, protocols=st.sampled_from(PROTOCOLS[:1] * 4 + PROTOCOLS), follow_up=st.sampled_from([True, True, False]))
    def join_new(self, index: int, protocols: tuple, follow_up: bool) -> None:
        """A client (re)starts and joins with no member id; dynamic v4+ rejoin at once with theirs."""
        t = self._join(index, "", protocols)
        reply = self.h.reply(t)
        if follow_up and reply is not None and reply["error_code"] == E.MEMBER_ID_REQUIRED:
            self._join(index, reply["member_id"], protocols)

    @rule(index=clients, protocols=st.sampled_from(PROTOCOLS[:1] * 6 + PROTOCOLS))
    def rejoin(self, index: int, protocols: tuple) -> None:
        """A client rejoins with the member id it has (possibly stale or fenced)."""
        index = self._in_group(index)
        self._join(index, self.clients[index].member_id, protocols)

    @precondition(lambda self: any(c.generation >= 0 for c in self.clients))
    @rule(index=clients, seed=st.integers(0, 3), drop=rarely, stale=rarely, leader=st.booleans())
    def sync(self, index: int, seed: int, drop: bool, stale: bool, leader: bool) -> None:
        leaders = [i for i, c in enumerate(self.clients) if c.members_view]
        index = leaders[index % len(leaders)] if leader and leaders else self._in_group(index)
        self._sync(index, seed, drop, stale)

    def _sync(self, index: int, seed: int, drop: bool, stale: bool) -> None:
        c = self.clients[index]
        g = self.h.coord.groups.get(GROUP)
        generation = c.generation - (1 if stale else 0)
        assignments = {m: f"{seed}:{identity_of(m)}".encode() for m in c.members_view}
        if drop and assignments:
            assignments.pop(next(iter(assignments)))
        was_completing = g is not None and g.state is S.COMPLETING_REBALANCE
        was_leader = g is not None and g.leader == c.member_id and g.generation == generation
        t = self.h.sync(GROUP, c.member_id, generation, instance=c.instance, assignments=assignments,
                        version=3 if c.version < 7 else 5,
                        protocol_name=g.protocol if g is not None and g.protocol else "range")
        g = self.h.coord.groups.get(GROUP)
        if was_completing and was_leader and g is not None and g.state is S.STABLE:
            self.leader_assignments[(GROUP, generation)] = {
                identity_of(m): assignments.get(m, b"") for m in g.members}
        self._record("sync", index, t, (c.member_id, generation))
        self._absorb()

    @precondition(lambda self: any(c.generation >= 0 for c in self.clients))
    @rule(seed=st.integers(0, 3))
    def everyone_syncs(self, seed: int) -> None:
        """Well-behaved clients: whoever believes it leads syncs first, then the others."""
        order = sorted(range(len(self.clients)), key=lambda i: not self.clients[i].members_view)
        for i in order:
            if self.clients[i].generation >= 0:
                self._sync(i, seed, drop=False, stale=False)

    @rule(index=clients, stale=rarely)
    def heartbeat(self, index: int, stale: bool) -> None:
        c = self.clients[self._in_group(index)]
        self.h.heartbeat(GROUP, c.member_id, c.generation - (1 if stale else 0), instance=c.instance)

    @rule(ms=st.sampled_from([0, 1_000, 4_000]))
    def everyone_heartbeats(self, ms: int) -> None:
        """Time passes while every client that thinks it is a member keeps heartbeating."""
        self.h.advance(ms)
        for c in self.clients:
            if c.generation >= 0:
                self.h.heartbeat(GROUP, c.member_id, c.generation, instance=c.instance)
        self._absorb()

    @rule(index=clients, by_instance=st.booleans(), version=st.sampled_from([0, 2, 3, 5]))
    def leave(self, index: int, by_instance: bool, version: int) -> None:
        c = self.clients[self._in_group(index)]
        if version >= 3:
            member = ("", c.instance) if by_instance and c.instance else (c.member_id, c.instance)
            self.h.leave(GROUP, version=version, members=[member])
        else:
            self.h.leave(GROUP, c.member_id, version=version)
        self._absorb()

    @rule(index=clients, partition=st.integers(0, 2), offset=st.integers(0, 100),
          as_member=st.booleans(), version=st.sampled_from([2, 6, 8]))
    def commit(self, index: int, partition: int, offset: int, as_member: bool, version: int) -> None:
        c = self.clients[self._in_group(index)]
        if as_member:
            self.h.commit(GROUP, {("t", partition): (offset, c.client_id)}, member_id=c.member_id,
                          generation=c.generation, instance=c.instance if version >= 7 else None,
                          version=version, leader_epoch=offset % 5,
                          retention=60_000 if version == 2 and offset % 2 else -1)
        else:
            self.h.commit(SIMPLE if offset % 2 else GROUP, {("t", partition): offset}, version=version)
        self._absorb()

    @rule()
    def next_deadline(self) -> None:
        """Jump exactly to the next timer (e.g. the end of a join phase)."""
        deadline = self.h.coord.next_deadline()
        if deadline is not None:
            self.h.advance_to(max(deadline, self.h.now))
            self._absorb()

    @rule(ms=st.sampled_from([0, 100, 500, 1_000, 3_000, 3_000, 6_000, 15_000, 45_000]))
    def advance(self, ms: int) -> None:
        self.h.advance(ms)
        self._absorb()

    # ------------------------------------------------------------ invariants

    @invariant()
    def one_leader_among_members(self) -> None:
        for g in self.h.coord.groups.values():
            if g.members:
                assert g.leader in g.members, (g.leader, list(g.members))
            else:
                assert g.leader is None
            assert set(g.static_members.values()) <= set(g.members)
            for instance, member_id in g.static_members.items():
                assert g.members[member_id].group_instance_id == instance
            assert not (set(g.pending_members) & set(g.members))

    @invariant()
    def no_join_left_waiting_for_nobody(self) -> None:
        """A (non-initial) join phase everyone has joined completes at once, not at a later timer."""
        for g in self.h.coord.groups.values():
            if g.state is S.PREPARING_REBALANCE and g.initial_delay_remaining is None:
                assert not g.has_all_members_joined(), g

    @invariant()
    def kept_tallies_match_the_members(self) -> None:
        """The protocol support counts and the parked-join count a join reads in O(1) are what
        counting the members would give."""
        for g in self.h.coord.groups.values():
            support: dict[str, int] = {}
            for m in g.members.values():
                for name in {name for name, _ in m.protocols}:
                    support[name] = support.get(name, 0) + 1
            assert g.protocol_support == support
            assert g.awaiting_joins == sum(1 for m in g.members.values() if m.join_ticket is not None)

    @invariant()
    def generation_never_decreases(self) -> None:
        for gid, g in self.h.coord.groups.items():
            assert g.generation >= self.max_generation.get(gid, 0)
            self.max_generation[gid] = g.generation

    @invariant()
    def parked_requests_are_really_parked(self) -> None:
        g = self.h.coord.groups.get(GROUP)
        parked = set(self.h.parked())
        held = set()
        if g is not None:
            for m in g.members.values():
                held |= {t for t in (m.join_ticket, m.sync_ticket) if t is not None}
        assert parked == held  # nothing parked is forgotten, nothing answered is still held

    @invariant()
    def state_equals_replay_of_records(self) -> None:
        h = self.h
        fresh = GroupCoordinatorShard(h.config, new_id=IdCounter())
        for key, value in h.records:
            fresh.replay_bytes(key, value)
        fresh.finish_load(h.now)
        assert fresh.offsets.snapshot() == h.coord.offsets.snapshot()
        assert set(fresh.groups) <= set(h.coord.groups)
        for gid, g in h.coord.groups.items():
            if g.state not in (S.STABLE, S.EMPTY):
                continue
            r = fresh.groups.get(gid)
            if g.generation == 0 and not h.coord.offsets.has_group(gid):
                assert r is None  # never persisted
                continue
            assert r is not None, gid
            assert r.state is g.state
            if g.generation == 0:
                # Known only by its offsets (a simple group): nothing of the group itself is persisted.
                assert (r.generation, r.protocol_type, r.members) == (0, None, {})
                continue
            # Everything a GroupMetadata record persists, member by member. A Stable group's record
            # is written as the leader's assignment arrives, before the group turns Stable, so it
            # carries the CompletingRebalance time (as Kafka's does); only Empty, the state expiry
            # counts from, has its own time in the record.
            live, loaded = g.metadata(), r.metadata()
            if g.state is S.STABLE:
                loaded = dataclasses.replace(loaded, current_state_timestamp=live.current_state_timestamp)
            assert loaded == live
            assert r.static_members == g.static_members

    def teardown(self) -> None:
        h = getattr(self, "h", None)
        if h is None:
            return
        h.run_timers()
        self._absorb()
        assert h.parked() == [], "requests never answered"
        g = h.coord.groups.get(GROUP)
        assert g is None or g.state is S.EMPTY


TestCoordinatorMachine = CoordinatorMachine.TestCase
TestCoordinatorMachine.settings = settings(
    max_examples=50, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
