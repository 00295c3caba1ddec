"""Progress bars for the admin commands' long operations, on a terminal only.

Reading a group's history, looking up the log range of thousands of partitions, and
committing their offsets can take a while; on a terminal the command shows a bar per step
(on standard error, so standard output stays the command's result). When standard error
is not a terminal (piped, redirected, in CI) nothing is drawn. Work is done in chunks
(``CHUNK`` partitions per request) so a bar moves as it goes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import IO, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

T = TypeVar("T")

#: Partitions per ListOffsets or OffsetCommit request when the work is split for a bar.
CHUNK = 1000


class Steps:
    """The bars of one command: ``step`` for counted work, ``wait`` for one long call."""

    def __init__(self, stream: IO[str] | None = None, enabled: bool | None = None) -> None:
        stream = sys.stderr if stream is None else stream
        self.enabled = stream.isatty() if enabled is None else enabled
        self._progress: Progress | None = None
        if self.enabled:
            self._progress = Progress(
                SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), console=Console(file=stream, force_terminal=True), transient=True,
                redirect_stdout=False)

    def __enter__(self) -> Steps:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Take the bars off the screen (before printing the result); idempotent."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    @contextmanager
    def step(self, description: str, total: int) -> Iterator[Callable[[int], None]]:
        """A bar of ``total`` units; the context gives ``advance(n)``."""
        progress = self._progress
        if progress is None:
            yield lambda n: None
            return
        task = progress.add_task(description, total=total)
        progress.refresh()
        try:
            yield lambda n: progress.advance(task, n)
        finally:
            progress.update(task, completed=total)
            progress.refresh()

    def wait(self, description: str, call: Callable[[], T]) -> T:
        """One call whose length is unknown: a spinner while it runs."""
        with self.step(description, 1) as advance:
            result = call()
            advance(1)
        return result

    def chunked(self, description: str, items: Sequence[T], work: Callable[[Sequence[T]], None],
                size: int = CHUNK) -> None:
        """``work`` over ``items`` in chunks of ``size``, the bar counting items."""
        with self.step(description, len(items)) as advance:
            for start in range(0, len(items), size):
                chunk = items[start : start + size]
                work(chunk)
                advance(len(chunk))


def chunks(items: Iterable[T], size: int = CHUNK) -> Iterator[list[T]]:
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
