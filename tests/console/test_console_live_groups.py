"""The console against live groups of both types: a KIP-848 consumer group of librdkafka
members shows its type, epochs and each member's assignment, read through
ConsumerGroupDescribe; a classic group beside it shows its type too (ListGroups v5)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.console.conftest import Console, start_console
from tests.console.test_console import Browserless
from tests.support.clients import ConsumerProtocolConsumer, KafkaPythonConsumer, create_topic, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Console]:
    started = start_console(tmp_path / "data")
    try:
        yield started
    finally:
        assert started.proc.stop() == 0, started.proc.log()


def test_a_live_consumer_group_page_shows_its_type_epochs_and_assignments(live: Console) -> None:
    create_topic(live.bootstrap, "payments", 4)
    members = [ConsumerProtocolConsumer(live.bootstrap, "pay848", "payments").start() for _ in range(2)]
    classic = KafkaPythonConsumer(live.bootstrap, "payclassic", "payments").start()
    client = Browserless(live.base)
    try:
        wait_until(lambda: sorted(len(m.owned) for m in members) == [2, 2], 60, "two members with two each")
        page = ""

        def stable() -> bool:
            nonlocal page
            status, _, page = client.request("/groups/pay848")
            return status == 200 and re.search(r'id="group-state"[^>]*>Stable<', page) is not None

        wait_until(stable, 30, "the console to show the group Stable")
        assert re.search(r'id="group-type">consumer<', page)
        epoch = re.search(r'id="group-epoch">(\d+)<', page)
        assert epoch is not None and int(epoch.group(1)) >= 2
        for m in members:
            for topic, partition in m.owned:
                assert f'<span class="tp">{topic}-{partition}</span>' in page

        wait_until(lambda: bool(classic.assignment), 60, "the classic member's assignment")
        status, _, listing = client.request("/groups")
        assert status == 200
        rows = dict(re.findall(r'<tr data-group="([^"]+)">.*?class="group-type"[^>]*>(\w+)</td>', listing, re.S))
        assert rows.get("pay848") == "consumer" and rows.get("payclassic") == "classic", rows
    finally:
        for m in members:
            m.stop()
        classic.stop()
