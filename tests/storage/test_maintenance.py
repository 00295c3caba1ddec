"""The maintenance scheduler: jobs on their intervals, one at a time, off the event loop."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pytest
import trio
import trio.testing

from storage.cleaner import CleanResult
from storage.maintenance import Job, Maintenance
from storage.partition import PartitionLog
from tests.support.group_commit import eventually


class Recorder:
    """Jobs that note when they ran, in which thread, and how many ran at once."""

    def __init__(self) -> None:
        self.log: list[tuple[str, float]] = []
        self.running = 0
        self.most_at_once = 0
        self.threads: set[int] = set()
        self._lock = threading.Lock()

    def job(self, name: str, interval: float, *, fail: bool = False, work: float = 0.0) -> Job:
        def run() -> str:
            with self._lock:
                self.running += 1
                self.most_at_once = max(self.most_at_once, self.running)
                self.threads.add(threading.get_ident())
            try:
                time.sleep(work)
                self.log.append((name, trio.from_thread.run_sync(trio.current_time)))
                if fail:
                    raise OSError(f"{name} failed")
                return name
            finally:
                with self._lock:
                    self.running -= 1

        return Job(name, interval, run)


async def advance(clock: trio.testing.MockClock, maintenance: Maintenance, seconds: float) -> None:
    """Move the clock in small steps, letting every job that falls due finish its thread."""
    for _ in range(round(seconds / 0.5)):
        clock.jump(0.5)
        await trio.testing.wait_all_tasks_blocked()
        await eventually(lambda: maintenance.running is None)
        await trio.testing.wait_all_tasks_blocked()


async def test_each_job_runs_on_its_own_interval(mock_clock: trio.testing.MockClock) -> None:
    recorder = Recorder()
    maintenance = Maintenance([recorder.job("clean", 15.0), recorder.job("retention", 40.0)])
    async with trio.open_nursery() as nursery:
        await nursery.start(maintenance.run)
        await advance(mock_clock, maintenance, 100.5)
        nursery.cancel_scope.cancel()
    cleans = [at for name, at in recorder.log if name == "clean"]
    retentions = [at for name, at in recorder.log if name == "retention"]
    assert len(cleans) == 6 and len(retentions) == 2
    assert cleans[0] == pytest.approx(15.0) and retentions[0] == pytest.approx(40.0)
    assert all(b - a == pytest.approx(15.0) for a, b in itertools.pairwise(cleans))
    assert maintenance.runs == {"clean": 6, "retention": 2}


async def test_jobs_run_one_at_a_time_in_worker_threads() -> None:
    recorder = Recorder()
    jobs = [recorder.job(f"job-{i}", 0.01, work=0.02) for i in range(3)]
    maintenance = Maintenance(jobs)
    async with trio.open_nursery() as nursery:
        await nursery.start(maintenance.run)
        await eventually(lambda: all(count >= 3 for count in maintenance.runs.values()))
        nursery.cancel_scope.cancel()
    assert recorder.most_at_once == 1
    assert threading.get_ident() not in recorder.threads, "never on the event loop's thread"


async def test_a_failing_job_is_retried_and_does_not_stop_the_others(
    mock_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()
    maintenance = Maintenance([recorder.job("broken", 10.0, fail=True), recorder.job("fine", 10.0)])
    async with trio.open_nursery() as nursery:
        await nursery.start(maintenance.run)
        await advance(mock_clock, maintenance, 35)
        nursery.cancel_scope.cancel()
    assert maintenance.failures == {"broken": 3, "fine": 0}
    assert maintenance.runs == {"broken": 0, "fine": 3}
    assert "broken failed; trying again in 10000 ms" in caplog.text


async def test_done_gets_the_result_and_the_duration_on_the_event_loop(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", 300)
    for i in range(40):
        log.append([(b"k%d" % (i % 3), b"v" * 30)], 1)
    seen: list[tuple[CleanResult, float, int]] = []
    job = Job("compaction", 0.01, lambda: log.compact(1, 0),
              lambda result, seconds: seen.append((result, seconds, threading.get_ident())))
    maintenance = Maintenance([job])
    async with trio.open_nursery() as nursery:
        await nursery.start(maintenance.run)
        await eventually(lambda: bool(seen))
        nursery.cancel_scope.cancel()
    result, seconds, thread = seen[0]
    assert result.bytes_after < result.bytes_before and seconds > 0
    assert thread == threading.get_ident()
    log.close()


def test_job_names_must_differ_and_intervals_be_positive() -> None:
    with pytest.raises(ValueError, match="differ"):
        Maintenance([Job("a", 1, lambda: None), Job("a", 2, lambda: None)])
    with pytest.raises(ValueError, match="positive"):
        Job("a", 0, lambda: None)
