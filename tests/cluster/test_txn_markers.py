"""A clustered coordinator's markers (cluster.txn_markers): written here for the partitions this
node leads, retried while a partition's leader is unknown or refuses, skipped for deleted
topics, and given up once the job is no longer this coordinator's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import trio

from broker.txn.markers import MarkerRequest
from broker.txn.state import TopicPartition
from cluster.txn_markers import MarkerSender
from protocol.errors import ErrorCode

E = ErrorCode
ME = 1
JOB = MarkerRequest("app", 5, 0, True, 9, (("t", 0), ("t", 1), ("__consumer_offsets", 3)))


@dataclass
class Leadership:
    leader: int
    epoch: int = 1


@dataclass
class Topic:
    partitions: int


@dataclass
class Image:
    leaders: dict[TopicPartition, Leadership]
    topics: dict[str, Topic] = field(default_factory=lambda: {"t": Topic(2)})

    def leader_of(self, tp: TopicPartition) -> Leadership | None:
        return self.leaders.get(tp)


@dataclass
class Coordinator:
    current: bool = True

    def is_current(self, job: MarkerRequest) -> bool:
        return self.current


@dataclass
class Service:
    """Writes markers 'locally'; the first answer for ``flaky`` partitions is NOT_LEADER_OR_FOLLOWER."""

    coordinator: Coordinator = field(default_factory=Coordinator)
    flaky: set[TopicPartition] = field(default_factory=set)
    written: list[TopicPartition] = field(default_factory=list)

    async def write_local_markers(self, job: MarkerRequest, partitions: tuple[TopicPartition, ...]
                                  ) -> dict[TopicPartition, ErrorCode]:
        out = {}
        for tp in partitions:
            if tp in self.flaky:
                self.flaky.discard(tp)
                out[tp] = E.NOT_LEADER_OR_FOLLOWER
            else:
                self.written.append(tp)
                out[tp] = E.NONE
        return out


def sender(image: Image, service: Service) -> MarkerSender:
    return MarkerSender(ME, image, lambda: service, lambda node: None)  # type: ignore[arg-type, return-value]


async def test_every_marker_is_written_and_a_refused_one_is_retried() -> None:
    image = Image({tp: Leadership(ME) for tp in JOB.partitions})
    service = Service(flaky={("t", 1)})
    with trio.fail_after(5):
        assert await sender(image, service).write_markers(JOB)
    assert sorted(service.written) == sorted(JOB.partitions)


async def test_a_partition_without_a_leader_waits_until_one_leads_it() -> None:
    image = Image({tp: Leadership(ME) for tp in JOB.partitions if tp != ("t", 0)})
    service = Service()
    done: list[bool] = []

    async def send() -> None:
        done.append(await sender(image, service).write_markers(JOB))

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            await trio.sleep(0.2)
            assert not done and ("t", 0) not in service.written
            image.leaders[("t", 0)] = Leadership(ME)
    assert done == [True] and ("t", 0) in service.written


async def test_a_deleted_topic_needs_no_marker() -> None:
    image = Image({("__consumer_offsets", 3): Leadership(ME)}, topics={})
    service = Service()
    with trio.fail_after(5):
        assert await sender(image, service).write_markers(JOB)
    assert service.written == [("__consumer_offsets", 3)]


async def test_a_job_that_is_no_longer_this_coordinators_is_given_up() -> None:
    image: Any = Image({})  # no leaders: it would wait forever
    service = Service()
    send = sender(image, service)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            outcome: list[bool] = []
            nursery.start_soon(lambda: _store(outcome, send.write_markers(JOB)))
            await trio.sleep(0.1)
            service.coordinator.current = False
    assert outcome == [False]


async def _store(out: list[bool], awaitable: Any) -> None:
    out.append(await awaitable)
