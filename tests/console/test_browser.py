"""The console in a real browser, against a live broker with real consumer groups.

One broker and one Chromium serve the module. The groups are made by real clients:

- ``billing``: a kafka-python consumer that read everything and stays: Stable, lag 0;
- ``audit``: offsets committed by an admin client and left behind: Empty, lag 15;
- ``rewind``: Empty at the log end, reset through the console's form;
- ``history``: five commits on a one-partition topic, each one a point on the chart;
- ``doomed``: its offsets of one topic, then the group, deleted through the console.

Each page is saved at 1280x800 under build/console-screenshots (docs/console.md).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from admin.client import LATEST_TIMESTAMP, AdminClient, CommittedOffset
from admin.render import described_group
from tests.console.conftest import Console, screenshot
from tests.support.clients import KafkaPythonConsumer, create_topic, wait_until

pytestmark = pytest.mark.integration

ORDERS = "orders"  # 3 partitions of 10 records each
EVENTS = "events"  # 1 partition of 10 records
HISTORY_COMMITS = (1, 2, 4, 7, 9)
#: When the third history commit (offset 4) was the latest: the restore test goes back there.
AS_OF: dict[str, int] = {}


def _produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for i in range(per_partition):
            for p in range(partitions):
                producer.send(topic, value=b"%s-%d-%d" % (topic.encode(), p, i), partition=p)
        producer.flush(10)
    finally:
        producer.close(5)


def _commit(admin: AdminClient, group: str, offsets: dict[tuple[str, int], int]) -> None:
    admin.commit_offsets(group, {tp: CommittedOffset(o) for tp, o in offsets.items()})


@pytest.fixture(scope="module")
def scene(console: Console) -> Iterator[Console]:
    bootstrap = console.bootstrap
    create_topic(bootstrap, ORDERS, 3)
    create_topic(bootstrap, EVENTS, 1)
    _produce(bootstrap, ORDERS, 3, 10)
    _produce(bootstrap, EVENTS, 1, 10)
    with AdminClient(bootstrap) as admin:
        _commit(admin, "audit", {(ORDERS, 0): 4, (ORDERS, 1): 10, (ORDERS, 2): 1})
        _commit(admin, "rewind", {(ORDERS, p): 10 for p in range(3)})
        for offset in HISTORY_COMMITS:
            _commit(admin, "history", {(EVENTS, 0): offset})
            if offset == 4:
                time.sleep(0.05)
                AS_OF["ms"] = int(time.time() * 1000)
                time.sleep(0.05)
        _commit(admin, "doomed", {(ORDERS, 0): 5, (EVENTS, 0): 5})
    billing = KafkaPythonConsumer(bootstrap, "billing", ORDERS, auto_commit_interval_ms=200,
                                  client_id="billing-client")
    billing.start()
    try:
        wait_until(lambda: len(billing.messages) >= 30, 30, "billing to read every record")
        with AdminClient(bootstrap) as admin:
            wait_until(lambda: sum(c.offset for c in admin.fetch_offsets("billing").values()) == 30
                       and admin.describe_group("billing").state == "Stable", 30,
                       "billing to commit the log end while Stable")
        yield console
    finally:
        billing.stop()


def _open(page: Any, url: str) -> None:
    response = page.goto(url)
    assert response is not None and response.status == 200, (url, response and response.status)


def _rows(page: Any, selector: str) -> list[list[str]]:
    return page.eval_on_selector_all(
        f"{selector} tbody tr:not([hidden])",
        "rows => rows.map(r => Array.from(r.cells).map(c => c.innerText.trim()))")


def test_overview_shows_nodes_topics_groups_and_commit_rate(scene: Console, page: Any) -> None:
    _open(page, scene.base + "/")
    nodes = _rows(page, "#nodes")
    assert nodes == [["0", scene.bootstrap]]
    topics = {row[0]: row[1] for row in _rows(page, "#topics")}
    assert topics == {EVENTS: "1", ORDERS: "3"}
    states = {row[0]: int(row[1]) for row in _rows(page, "#groups-by-state")}
    assert states["Stable"] == 1 and states["Empty"] >= 4
    page.wait_for_function("() => window.Chart && Chart.getChart('commit-rate-chart')")
    screenshot(page, "overview")


def test_groups_list_shows_states_and_lag_and_can_be_searched_and_sorted(scene: Console, page: Any) -> None:
    _open(page, scene.base + "/groups")
    rows = {r[0]: r for r in _rows(page, "#groups-table")}
    assert rows["billing"][1:] == ["Stable", "classic", "1", "0"]
    assert rows["audit"][1:] == ["Empty", "classic", "0", "15"]  # (10-4) + 0 + (10-1)
    assert rows["rewind"][1:] == ["Empty", "classic", "0", "0"]
    assert rows["history"][1:] == ["Empty", "classic", "0", str(10 - HISTORY_COMMITS[-1])]
    screenshot(page, "groups")

    page.fill("#group-filter", "aud")
    assert [r[0] for r in _rows(page, "#groups-table")] == ["audit"]
    page.fill("#group-filter", "")
    page.click("#groups-table th[data-sort='lag']")
    lags = [int(r[4]) for r in _rows(page, "#groups-table") if r[4] != "-"]
    assert lags == sorted(lags) and lags[-1] == 15
    page.click("#groups-table th[data-sort='lag']")
    assert _rows(page, "#groups-table")[0][0] == "audit"


def test_a_group_page_shows_what_the_admin_api_says(scene: Console, page: Any) -> None:
    _open(page, scene.base + "/groups/billing")
    with AdminClient(scene.bootstrap) as admin:
        description = admin.describe_group("billing")
        committed = admin.fetch_offsets("billing")
        ends = admin.list_offsets({tp: LATEST_TIMESTAMP for tp in committed})
        expected = described_group(description, committed, ends)
    assert page.inner_text("#group-state") == expected["state"] == "Stable"
    shown = {(r[0], int(r[1])): r for r in _rows(page, "#partitions-table")}
    assert len(shown) == len(expected["offsets"]) == 3
    for row in expected["offsets"]:
        cells = shown[(row["topic"], row["partition"])]
        assert [int(cells[2]), int(cells[3]), int(cells[4])] == \
            [row["current_offset"], row["log_end_offset"], row["lag"]]
        assert cells[5].startswith(row["client_id"])
    (member,) = expected["members"]
    members = _rows(page, "#members-table")
    assert [(m[0], m[2], m[3]) for m in members] == [(member["member_id"], "billing-client", member["host"])]
    assert members[0][4].split() == [f"{ORDERS}-{p}" for p in range(3)]
    assert page.inner_text("#group-lag") == str(sum(r["lag"] for r in expected["offsets"]))
    page.wait_for_function("() => window.Chart && Chart.getChart('history-chart')")
    screenshot(page, "group")


def test_the_history_chart_has_one_point_per_commit(scene: Console, page: Any) -> None:
    _open(page, scene.base + "/groups/history")
    page.wait_for_function("() => window.Chart && Chart.getChart('history-chart')")
    points = page.evaluate(
        "() => Chart.getChart('history-chart').data.datasets.map(d => [d.label, d.data.map(p => p.y)])")
    assert points == [[f"{EVENTS}-0", list(HISTORY_COMMITS)]]
    lags = page.evaluate("() => Chart.getChart('lag-chart').data.datasets[0].data.map(p => p.y)")
    assert lags == [10 - offset for offset in HISTORY_COMMITS]  # all ten records were there already
    rate = page.evaluate("() => Chart.getChart('group-rate-chart').data.datasets[0].data")
    assert sum(rate) == len(HISTORY_COMMITS)
    screenshot(page, "group-history")


def test_a_reset_through_the_form_moves_where_a_new_consumer_starts(scene: Console, page: Any) -> None:
    _open(page, scene.base + "/groups/rewind")
    page.click("#reset-link")
    page.check("input[name='strategy'][value='to-offset']")
    page.fill("#strategy-value", "3")
    screenshot(page, "reset")
    page.click("#preview-button")
    preview = _rows(page, "#preview-table")
    assert [(r[0], r[1], r[2], r[4]) for r in preview] == [(ORDERS, str(p), "10", "3") for p in range(3)]
    with AdminClient(scene.bootstrap) as admin:  # nothing committed by the preview
        assert {tp: c.offset for tp, c in admin.fetch_offsets("rewind").items()} == \
            {(ORDERS, p): 10 for p in range(3)}
    screenshot(page, "reset-preview")
    page.click("#confirm-button")
    page.wait_for_url("**/groups/rewind?notice=*")
    assert "Committed 3 offsets" in page.inner_text(".notice")
    assert [r[2] for r in _rows(page, "#partitions-table")] == ["3", "3", "3"]

    from kafka import KafkaConsumer

    # auto_offset_reset="latest": had the reset not been committed, it would read nothing.
    consumer = KafkaConsumer(ORDERS, bootstrap_servers=scene.bootstrap, group_id="rewind",
                             auto_offset_reset="latest", enable_auto_commit=False)
    try:
        first: dict[int, int] = {}
        wait_until(lambda: _first_offsets(consumer, first) and len(first) == 3, 30,
                   "the new consumer to read from every partition")
    finally:
        consumer.close()
    assert first == {0: 3, 1: 3, 2: 3}


def _first_offsets(consumer: Any, first: dict[int, int]) -> bool:
    for records in consumer.poll(timeout_ms=200).values():
        for record in records:
            first.setdefault(record.partition, record.offset)
    return True


def test_restore_as_of_previews_the_offsets_the_group_had_then(scene: Console, page: Any) -> None:
    from admin.inputs import format_time

    _open(page, scene.base + "/groups/history/reset")
    page.check("input[name='strategy'][value='restore-as-of']")
    page.fill("#strategy-value", format_time(AS_OF["ms"]))
    page.click("#preview-button")
    assert "restore as of" in page.inner_text("h1")
    assert [(r[0], r[1], r[2], r[4]) for r in _rows(page, "#preview-table")] == [(EVENTS, "0", "9", "4")]
    assert page.query_selector("#confirm-button") is not None  # Empty: it could be committed


def test_a_reset_is_refused_while_the_group_has_members(scene: Console, page: Any) -> None:
    _open(page, scene.base + "/groups/billing/reset")
    page.check("input[name='strategy'][value='to-earliest']")
    page.click("#preview-button")
    assert "refuses to change the offsets of a group with members" in page.inner_text("#refused")
    assert page.query_selector("#confirm-button") is None
    # Posting a plan anyway (no preview): the console refuses, and so would the broker.
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "kcoord_console_csrf")
    offsets = '[{"topic": "orders", "partition": 0, "offset": 0, "leader_epoch": -1, "metadata": ""}]'
    response = page.request.post(scene.base + "/groups/billing/reset/commit",
                                 form={"csrf": token, "offsets": offsets, "action": "sneaky"})
    assert response.status == 409 and "Stable with 1 member" in response.text()
    with AdminClient(scene.bootstrap) as admin:
        assert admin.fetch_offsets("billing")[(ORDERS, 0)].offset == 10


def test_deleting_offsets_and_then_the_group_asks_for_confirmation(scene: Console, page: Any) -> None:
    _open(page, scene.base + "/groups/doomed/delete-offsets")
    page.check(f"input[name='topic'][value='{EVENTS}']")
    page.click("#delete-offsets-form button")
    assert page.inner_text("#delete-list") == f"{EVENTS}-0"
    screenshot(page, "delete-offsets")
    page.click("#delete-offsets-button")
    page.wait_for_url("**/groups/doomed?notice=*")
    assert [(r[0], r[1]) for r in _rows(page, "#partitions-table")] == [(ORDERS, "0")]

    _open(page, scene.base + "/groups/doomed/delete")
    page.fill("#confirm-name", "not-the-name")
    page.click("#delete-group-button")
    assert "exactly" in page.inner_text("#form-error")
    with AdminClient(scene.bootstrap) as admin:
        assert admin.fetch_offsets("doomed")  # still there
    page.fill("#confirm-name", "doomed")
    screenshot(page, "delete-group")
    page.click("#delete-group-button")
    page.wait_for_url("**/groups?notice=*")
    assert "doomed" not in [r[0] for r in _rows(page, "#groups-table")]
    with AdminClient(scene.bootstrap) as admin:
        assert admin.fetch_offsets("doomed") == {}


def test_a_topic_page_shows_partitions_and_the_groups_consuming_it(scene: Console, page: Any) -> None:
    _open(page, scene.base + f"/topics/{ORDERS}")
    assert _rows(page, "#topic-partitions") == [[str(p), "0", "10", "10"] for p in range(3)]
    consumers = {r[0]: (r[1], r[2]) for r in _rows(page, "#topic-groups")}
    assert consumers["billing"] == ("3", "0") and consumers["audit"] == ("3", "15")
    screenshot(page, "topic")
    _open(page, scene.base + "/topics")
    screenshot(page, "topics")


def test_pages_load_nothing_from_the_internet(scene: Console, page: Any) -> None:
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    for path in ("/", "/groups", "/groups/history", f"/topics/{ORDERS}"):
        _open(page, scene.base + path)
    assert requested and all(url.startswith(scene.base + "/") for url in requested), requested
