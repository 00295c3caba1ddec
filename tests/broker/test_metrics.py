"""The exposition format, the histogram, and what a running server reports."""

from __future__ import annotations

import math
import re
import tempfile
from pathlib import Path

import pytest
import trio
from prometheus_client import generate_latest

from broker.config import Config
from broker.context import BrokerContext
from broker.coordinator.classic.state import ClassicGroupState as GroupState
from broker.coordinator.modern.consumer.group import ConsumerGroupState
from broker.metrics import REQUEST_BUCKETS, Family, Histogram, registry
from broker.router import Close, Router
from broker.server import Server
from broker.slots import Slot
from protocol.api_keys import ApiKey
from protocol.codec import encode_request
from tests.support.prometheus import parse

DOCS = Path(__file__).resolve().parents[2] / "docs"


# --- families through prometheus-client ------------------------------------------------


def _expose(*families: Family) -> str:
    return generate_latest(registry(lambda: families, process=False)).decode()


def test_counter_and_gauge_render_with_help_and_type() -> None:
    text = _expose(
        Family("kcoord_things_total", "counter", "Things seen.").add(3),
        Family("kcoord_level", "gauge", "A level.").add(1.5, side="left").add(-2, side="right"),
    )
    assert text == (
        "# HELP kcoord_things_total Things seen.\n"
        "# TYPE kcoord_things_total counter\n"
        "kcoord_things_total 3.0\n"
        "# HELP kcoord_level A level.\n"
        "# TYPE kcoord_level gauge\n"
        'kcoord_level{side="left"} 1.5\n'
        'kcoord_level{side="right"} -2.0\n'
    )
    parsed = parse(text)
    assert parsed.types == {"kcoord_things_total": "counter", "kcoord_level": "gauge"}
    assert parsed.get("kcoord_things_total") == 3


def test_label_values_survive_the_round_trip() -> None:
    text = _expose(Family("kcoord_x", "gauge", "x").add(1, client='say "hi"\\\nbye'))
    assert parse(text).get("kcoord_x", client='say "hi"\\\nbye') == 1


def test_help_text_survives_the_round_trip() -> None:
    text = _expose(Family("kcoord_x", "gauge", 'line one\nback\\slash "quoted"').add(0))
    assert parse(text).helps["kcoord_x"] == 'line one\nback\\slash "quoted"'


@pytest.mark.parametrize("name", ["", "1abc", "has-dash", "sp ace"])
def test_invalid_metric_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError):
        Family(name, "gauge", "x")


def test_invalid_label_names_are_refused() -> None:
    family = Family("kcoord_x", "gauge", "x")
    for bad in ("le", "__reserved", "0a"):
        with pytest.raises(ValueError):
            family.add(1, **{bad: "v"})
    with pytest.raises(ValueError):
        Family("kcoord_x", "summary", "x")


def test_histogram_buckets_are_cumulative_and_end_with_inf() -> None:
    histogram = Histogram([0.1, 1.0, 10.0])
    for value in (0.05, 0.1, 0.5, 1.0, 3.0, 99.0):
        histogram.observe(value)
    # A value equal to a bound counts in that bound's bucket (le means <=).
    assert histogram.cumulative() == [(0.1, 2), (1.0, 4), (10.0, 5), (math.inf, 6)]
    text = _expose(Family("kcoord_wait_seconds", "histogram", "Waits.").add_histogram(histogram, api="Fetch"))
    assert text.splitlines()[2:] == [
        'kcoord_wait_seconds_bucket{api="Fetch",le="0.1"} 2.0',
        'kcoord_wait_seconds_bucket{api="Fetch",le="1.0"} 4.0',
        'kcoord_wait_seconds_bucket{api="Fetch",le="10.0"} 5.0',
        'kcoord_wait_seconds_bucket{api="Fetch",le="+Inf"} 6.0',
        'kcoord_wait_seconds_sum{api="Fetch"} 103.65',
        'kcoord_wait_seconds_count{api="Fetch"} 6.0',
    ]
    parsed = parse(text)
    assert parsed.get("kcoord_wait_seconds_bucket", api="Fetch", le="+Inf") == \
        parsed.get("kcoord_wait_seconds_count", api="Fetch")


def test_empty_histogram_renders_zero_buckets() -> None:
    parsed = parse(_expose(Family("kcoord_h", "histogram", "h").add_histogram(Histogram([1.0]))))
    assert parsed.series("kcoord_h_bucket") == {(("le", "1.0"),): 0, (("le", "+Inf"),): 0}
    assert parsed.get("kcoord_h_sum") == 0 and parsed.get("kcoord_h_count") == 0


def test_the_registry_adds_the_process_metrics() -> None:
    parsed = parse(generate_latest(registry(lambda: [])).decode())
    for name in ("process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds",
                 "process_start_time_seconds"):
        assert name in parsed.types, name
    assert parsed.get("process_open_fds") > 0


@pytest.mark.parametrize("bounds", [[1.0, 1.0], [2.0, 1.0], [1.0, math.inf]])
def test_histogram_bounds_must_increase_and_be_finite(bounds: list[float]) -> None:
    with pytest.raises(ValueError):
        Histogram(bounds)


def test_a_histogram_family_only_takes_histograms() -> None:
    with pytest.raises(ValueError):
        Family("kcoord_x_total", "counter", "x").add_histogram(Histogram([1.0]))


# --- the router's request counters ----------------------------------------------------


def _router() -> Router:
    config = Config()
    return Router(BrokerContext(config=config, node_id=0, host="127.0.0.1", port=9092, cluster_id="c"))


def test_requests_are_counted_per_api_and_version_and_timed() -> None:
    router = _router()
    for version in (0, 3, 3):
        frame = encode_request(18, version, 7, {"client_software_name": "t", "client_software_version": "1"}, "c")
        assert isinstance(router.route(frame[4:], "peer:1"), bytes)
    stats = router.api_stats[18]
    assert stats.name == "ApiVersions"
    assert stats.requests[0] == 1 and stats.requests[3] == 2
    assert stats.latency.count == 3 and stats.latency.sum > 0


def test_refused_requests_are_counted_by_reason() -> None:
    router = _router()
    assert isinstance(router.route(b"\x00\x12", "peer:1"), Close)  # a truncated header
    unsupported = encode_request(11, 5, 1, {"group_id": "g", "session_timeout_ms": 10000,
                                            "rebalance_timeout_ms": 10000, "member_id": "",
                                            "group_instance_id": None, "protocol_type": "consumer",
                                            "protocols": []}, "c")
    assert isinstance(router.route(unsupported[4:], "peer:1"), Close)  # JoinGroup has no handler here

    def broken(_request: object, _peer: str) -> None:
        raise RuntimeError("a bug")

    router.register(ApiKey.HEARTBEAT, broken)
    beat = encode_request(12, 3, 1, {"group_id": "g", "generation_id": 1, "member_id": "m",
                                     "group_instance_id": None}, "c")
    assert isinstance(router.route(beat[4:], "peer:1"), Close)
    assert router.errors == {"frame": 0, "malformed": 1, "unsupported": 1, "internal": 1}
    assert router.api_stats[12].requests[3] == 1


def test_a_reply_that_waited_is_timed_when_it_is_sent() -> None:
    router = _router()
    slot = Slot(12, 3, 1)

    router.register(ApiKey.HEARTBEAT, lambda _request, _peer: slot)
    beat = encode_request(12, 3, 1, {"group_id": "g", "generation_id": 1, "member_id": "m",
                                     "group_instance_id": None}, "c")
    assert router.route(beat[4:], "peer:1") is slot
    stats = router.api_stats[12]
    assert stats.requests[3] == 1 and stats.latency.count == 0  # not ready yet
    slot.fill(b"reply")
    router.finished(slot, "peer:1")
    assert stats.latency.count == 1
    assert stats.latency.sum < REQUEST_BUCKETS[-1]


# --- a real server's metrics -----------------------------------------------------------


def _scrape_real_server() -> str:
    async def main() -> str:
        with tempfile.TemporaryDirectory() as data_dir:
            server = Server(Config(), "127.0.0.1", 0, Path(data_dir))
            async with trio.open_nursery() as nursery:
                await nursery.start(server.serve)
                text = generate_latest(registry(server.collect)).decode()
                server.shutdown()
            return text

    return trio.run(main)


def test_a_server_reports_every_group_state_and_its_subsystems() -> None:
    exposition = parse(_scrape_real_server())
    states = {dict(labels)["state"] for labels in exposition.series("kcoord_groups")}
    assert states == {s.value for s in GroupState} | {s.value for s in ConsumerGroupState}
    assert exposition.get("kcoord_serving") == 1
    for name in ("kcoord_connections", "kcoord_offsets", "kcoord_coordinator_log_bytes", "kcoord_topics",
                 "kcoord_coordinator_log_fsync_duration_seconds_count", "kcoord_produced_records_total"):
        assert (name, ()) in exposition.samples, name


def _documented_metrics(cluster: bool) -> set[str]:
    """The metrics docs/monitoring.md lists: a cluster node's own section, or all the others."""
    text = (DOCS / "monitoring.md").read_text()
    start = text.index("### A cluster node")
    end = text.find("\n#", start + 1)
    section = text[start:end if end != -1 else len(text)]
    names = set(re.findall(r"^\| `((?:kcoord|process|python)_\w+)`", section, re.M))
    return names if cluster else set(re.findall(r"^\| `((?:kcoord|process|python)_\w+)`", text, re.M)) - names


def test_monitoring_doc_lists_every_metric() -> None:
    exposition = parse(_scrape_real_server())
    documented = _documented_metrics(cluster=False)  # a single node has no cluster metrics
    # Families without samples yet (no request seen) still have their HELP and TYPE lines.
    assert documented == set(exposition.types), set(exposition.types) ^ documented


def test_monitoring_doc_lists_every_metric_of_a_cluster_node(tmp_path: Path) -> None:
    from cluster.node import ClusterNode  # a node that is never started: its metrics only

    node = ClusterNode(Config({"cluster.etcd.endpoints": "http://127.0.0.1:1"}), tmp_path)
    collectors = node.collectors()
    exposition = parse(generate_latest(registry(
        lambda: [family for collect in collectors for family in collect()], process=False)).decode())
    documented = _documented_metrics(cluster=True)
    assert documented == set(exposition.types), set(exposition.types) ^ documented
