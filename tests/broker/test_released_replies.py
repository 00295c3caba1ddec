"""Replies that one sync makes durable leave their connection together, in one write.

A client that pipelines its commits has several replies waiting for the same sync. They
are released together (``broker.slots.set_all``), so the connection sends them as one
write instead of one write per reply: on a busy broker that is a socket call and a wake-up
of the client saved for every reply after the first.

The real ``Server`` runs in-process on a loopback port with durable commits; ``os.write``
is wrapped to see which writes carry the commit replies.

A read whose first queued reply waits leaves that reply to call its connection once set;
one that its own read released (a follower's SyncGroup the leader's, later in the same
read, answered) goes out with the read.
"""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.config import Config
from broker.server import Server
from protocol.codec import decode_response, encode_request
from tests.support.group_commit import eventually
from tests.support.wire import WireClient

PIPELINED = 8
FIRST_ID = 1000


def commit(correlation_id: int, offset: int) -> bytes:
    body = {"group_id": "pipelined", "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                     "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    return encode_request(8, 7, correlation_id, body, "kcoord-test")


def correlation_ids(payload: bytes) -> list[int]:
    """The correlation ids of the whole reply frames in one write."""
    ids, at = [], 0
    while at + 8 <= len(payload):
        size, correlation_id = struct.unpack_from(">ii", payload, at)
        ids.append(correlation_id)
        at += 4 + size
    return ids


def client_run(address: tuple[str, int]) -> list[int]:
    with WireClient(*address) as client:
        created = client.request(19, 4, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                                                    "assignments": [], "configs": []}],
                                         "timeout_ms": 5000, "validate_only": False})
        assert created.topics[0].error_code == 0
        client.send_raw(commit(FIRST_ID - 1, 1))  # the group's first commit, alone
        _, first = decode_response(8, 7, client.recv_frame())
        assert first.topics[0].partitions[0].error_code == 0
        client.send_raw(b"".join(commit(FIRST_ID + i, 2 + i) for i in range(PIPELINED)))
        errors = []
        for i in range(PIPELINED):
            got, body = decode_response(8, 7, client.recv_frame())
            assert got == FIRST_ID + i
            errors.append(body.topics[0].partitions[0].error_code)
        return errors


async def test_pipelined_commits_released_by_one_sync_leave_in_one_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[list[int]] = []
    real_write = os.write

    def write(fd: int, data: Any) -> int:
        if stat.S_ISSOCK(os.fstat(fd).st_mode):
            ids = [i for i in correlation_ids(bytes(data)) if FIRST_ID <= i < FIRST_ID + PIPELINED]
            if ids:
                writes.append(ids)
        return real_write(fd, data)

    config = Config({"offsets.topic.num.partitions": 1, "group.initial.rebalance.delay.ms": 0,
                     "log.flush.policy": "durable", "shutdown.grace.ms": 1000})
    server = Server(config, "127.0.0.1", 0, tmp_path / "data")
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve)
        monkeypatch.setattr(os, "write", write)
        with trio.fail_after(60):
            errors = await trio.to_thread.run_sync(client_run, address)
        monkeypatch.undo()
        assert server.groups is not None
        syncs = server.groups.commit.syncs
        nursery.cancel_scope.cancel()
    assert errors == [0] * PIPELINED
    assert syncs >= 2, "the commits were made durable before their replies"
    assert writes == [list(range(FIRST_ID, FIRST_ID + PIPELINED))], \
        "the replies one sync released went out in one write, in request order"


def one_commit(address: tuple[str, int]) -> int:
    with WireClient(*address) as client:
        client.request(19, 4, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                                          "assignments": [], "configs": []}],
                               "timeout_ms": 5000, "validate_only": False})
        client.send_raw(commit(FIRST_ID, 1))
        got, body = decode_response(8, 7, client.recv_frame())
        assert got == FIRST_ID
        return int(body.topics[0].partitions[0].error_code)


async def test_the_coordinators_syncs_run_on_the_poller_while_it_serves(tmp_path: Path) -> None:
    """Where the kernel runs the journal's fdatasync, the server's read poller starts the
    coordinator's syncs and takes their completions (``GroupCommit.poller_started``); once
    it stops, the flusher task has them back for the last syncs of the shutdown."""
    config = Config({"offsets.topic.num.partitions": 1, "group.initial.rebalance.delay.ms": 0,
                     "log.flush.policy": "durable", "shutdown.grace.ms": 1000})
    server = Server(config, "127.0.0.1", 0, tmp_path / "data")
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve)
        assert server.groups is not None
        group_commit = server.groups.commit
        if group_commit.flusher != "kernel":
            nursery.cancel_scope.cancel()
            pytest.skip("the kernel runs no fdatasync for this directory")
        await eventually(lambda: group_commit.polled)
        with trio.fail_after(60):
            assert await trio.to_thread.run_sync(one_commit, address) == 0
        assert group_commit.polled and group_commit.syncs >= 1
        server.shutdown()
    assert not group_commit.polled and group_commit.failure is None


def join(correlation_id: int) -> bytes:
    return encode_request(11, 3, correlation_id, {
        "group_id": "synced", "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000, "member_id": "",
        "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}, "kcoord-test")


def sync(correlation_id: int, generation: int, member: str, assignments: list[dict[str, Any]]) -> bytes:
    return encode_request(14, 3, correlation_id, {
        "group_id": "synced", "generation_id": generation, "member_id": member, "group_instance_id": None,
        "assignments": assignments}, "kcoord-test")


def syncs_in_one_read(address: tuple[str, int]) -> list[tuple[int, int]]:
    """Two members join; then, in one write on a third connection, the follower's SyncGroup
    (which waits for the leader's) and the leader's, which releases both."""
    with WireClient(*address) as a, WireClient(*address) as b, WireClient(*address) as c:
        a.send_raw(join(1))
        b.send_raw(join(2))
        joined = [decode_response(11, 3, client.recv_frame())[1] for client in (a, b)]
        assert [j.error_code for j in joined] == [0, 0]
        assert joined[0].generation_id == joined[1].generation_id, "both joined the same generation"
        leader = next(j for j in joined if j.member_id == j.leader)
        follower = next(j for j in joined if j.member_id != j.leader)
        assignments = [{"member_id": j.member_id, "assignment": b"x"} for j in joined]
        c.send_raw(sync(FIRST_ID, follower.generation_id, follower.member_id, [])
                   + sync(FIRST_ID + 1, leader.generation_id, leader.member_id, assignments))
        replies = [decode_response(14, 3, c.recv_frame()) for _ in range(2)]
        return [(correlation_id, body.error_code) for correlation_id, body in replies]


async def test_a_reply_its_own_read_releases_goes_out_with_that_read(tmp_path: Path) -> None:
    # Without an fsync the leader's SyncGroup answers the follower's at once, while the same
    # read is handled: the follower's reply, first in the connection's queue, is set before
    # the connection looks at its queue, and must go out then (nothing else would send it).
    config = Config({"offsets.topic.num.partitions": 1, "group.initial.rebalance.delay.ms": 1000,
                     "log.flush.policy": "os", "shutdown.grace.ms": 1000})
    server = Server(config, "127.0.0.1", 0, tmp_path / "data")
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve)
        with trio.fail_after(30):
            replies = await trio.to_thread.run_sync(syncs_in_one_read, address)
        nursery.cancel_scope.cancel()
    assert replies == [(FIRST_ID, 0), (FIRST_ID + 1, 0)]
