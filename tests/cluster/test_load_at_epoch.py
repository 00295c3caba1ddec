"""A coordinator partition is served only at the leader epoch its load began at.

Loading reads the partition's log in a thread. If the partition's leadership is written again
meanwhile (a new epoch, even with this node still the leader), the load is dropped and the next
pass loads it at the new epoch, for groups as for transactional ids."""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import pytest
import trio

import cluster.node as node_module
from cluster.model import Leadership
from cluster.node import ClusterNode

ME = 1
GROUPS_TP = ("__consumer_offsets", 3)
TXN_TP = ("__transaction_state", 3)


class FakeReplicator:
    def __init__(self) -> None:
        self.led: list[tuple[Any, int]] = []

    def lead(self, tp: Any, epoch: int, plog: Any, serving_before: bool) -> None:
        self.led.append((tp, epoch))

    async def caught_up(self, tp: Any, offset: int) -> bool:
        return True


class FakeGroups:
    def __init__(self) -> None:
        self.log = SimpleNamespace(open_partition=lambda partition: SimpleNamespace(next_offset=0), partitions=50)
        self.coordinator = SimpleNamespace(load_groups=self.load_groups)
        self.loaded = 0

    def load_groups(self, records: Any, now: int) -> tuple[None, list[str]]:
        self.loaded += 1
        return None, []

    def apply(self, fx: Any) -> None:
        pass

    def clock(self) -> int:
        return 0


class FakeTransactions:
    def __init__(self) -> None:
        self.log = SimpleNamespace(open_partition=lambda partition: SimpleNamespace(next_offset=0),
                                   replay_partition=self.replay_partition)
        self.loaded: list[int] = []
        self.during_read: Any = None

    def replay_partition(self, partition: int) -> list[Any]:
        self.during_read()
        return []

    def load_partition(self, partition: int, epoch: int, records: Any) -> int:
        self.loaded.append(epoch)
        return 0


def fake_node(tp: Any, epoch: int) -> Any:
    node = SimpleNamespace(
        node_id=ME, image=SimpleNamespace(leaders={tp: Leadership(ME, epoch)}), serving=SimpleNamespace(led={}),
        busy={tp}, _changed=trio.Event(), replicator=FakeReplicator(),
        broker=SimpleNamespace(groups=FakeGroups(), transactions=FakeTransactions()))
    node._still_leading = functools.partial(ClusterNode._still_leading, node)
    return node


@pytest.mark.parametrize("rewritten", [False, True])
async def test_groups_load_is_dropped_when_the_epoch_moved_during_the_read(
        monkeypatch: pytest.MonkeyPatch, rewritten: bool) -> None:
    node = fake_node(GROUPS_TP, 10)

    def read_log(log: Any, partition: int) -> list[Any]:
        if rewritten:  # the leader key is written again while the log is read: same leader, new epoch
            node.image.leaders[GROUPS_TP] = Leadership(ME, 11)
        return []

    monkeypatch.setattr(node_module, "_partition_events", read_log)
    await ClusterNode._load_groups(node, GROUPS_TP, 10)
    if rewritten:
        assert GROUPS_TP not in node.serving.led and node.broker.groups.loaded == 0
    else:
        assert node.serving.led == {GROUPS_TP: 10} and node.broker.groups.loaded == 1
    # Either way the partition is free for the next pass, which loads it at the current epoch.
    assert GROUPS_TP not in node.busy and node._changed.is_set()


@pytest.mark.parametrize("rewritten", [False, True])
async def test_transactions_load_is_dropped_when_the_epoch_moved_during_the_read(rewritten: bool) -> None:
    node = fake_node(TXN_TP, 10)

    def bump() -> None:
        if rewritten:
            node.image.leaders[TXN_TP] = Leadership(ME, 11)

    node.broker.transactions.during_read = bump
    await ClusterNode._load_transactions(node, TXN_TP, 10)
    if rewritten:
        assert TXN_TP not in node.serving.led and node.broker.transactions.loaded == []
    else:
        assert node.serving.led == {TXN_TP: 10} and node.broker.transactions.loaded == [10]
    assert TXN_TP not in node.busy and node._changed.is_set()


@pytest.mark.parametrize("leadership", [None, Leadership(2, 10)])
def test_a_partition_led_elsewhere_or_nowhere_is_not_served(leadership: Leadership | None) -> None:
    node = fake_node(GROUPS_TP, 10)
    node.image.leaders = {} if leadership is None else {GROUPS_TP: leadership}
    assert not ClusterNode._still_leading(node, GROUPS_TP, 10)
