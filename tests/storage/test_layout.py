"""storage.layout: the names and paths of a data directory, and that nobody else spells them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from storage import layout

REPO = Path(__file__).resolve().parents[2]


def test_the_files_of_a_data_directory(tmp_path: Path) -> None:
    assert layout.lock_file(tmp_path) == tmp_path / ".lock"
    assert layout.partition_count_file(tmp_path) == tmp_path / "__consumer_offsets.meta.json"
    assert layout.topics_file(tmp_path) == tmp_path / "topics.json"
    assert layout.producer_ids_file(tmp_path) == tmp_path / "producer_ids.json"
    assert layout.temp_file(tmp_path / "topics.json") == tmp_path / "topics.json.tmp"


def test_partition_directories(tmp_path: Path) -> None:
    assert layout.partition_dir(tmp_path, "orders", 3) == tmp_path / "orders-3"
    assert layout.coordinator_partition_dir(tmp_path, 12) == tmp_path / "__consumer_offsets-12"
    assert layout.parse_partition_dir("__consumer_offsets-12") == ("__consumer_offsets", 12)
    assert layout.security_partition_dir(tmp_path) == tmp_path / "__kcoord_security-0"
    assert layout.parse_partition_dir("my-topic-with-dashes-0") == ("my-topic-with-dashes", 0)
    for name in ("history", "topics.json", ".lock", "orders-", "-3", "orders-x"):
        assert layout.parse_partition_dir(name) is None


def test_history_paths(tmp_path: Path) -> None:
    live = tmp_path / "__consumer_offsets-4" / layout.segment_name(4711)
    assert layout.history_dir(tmp_path) == tmp_path / "history"
    assert layout.history_folder(tmp_path / "history", live.parent) == tmp_path / "history" / "__consumer_offsets-4"
    assert layout.history_copy_of(live) == tmp_path / "history" / "__consumer_offsets-4" / live.name


@pytest.mark.parametrize("offset", [0, 1, 4711, 2**63 - 1])
def test_segment_names_sort_like_offsets_and_parse_back(offset: int) -> None:
    name = layout.segment_name(offset)
    assert len(name) == 24 and name.endswith(".log")
    assert layout.parse_segment_name(name) == offset
    assert layout.parse_temp_name(name + layout.CLEANED_SUFFIX) == (offset, ".cleaned")
    assert layout.parse_temp_name(name + layout.SWAP_SUFFIX) == (offset, ".swap")
    assert layout.parse_segment_name(name + layout.SWAP_SUFFIX) is None
    assert layout.parse_temp_name(name) is None


def test_other_files_are_not_segments() -> None:
    for name in ("00000000000000000000.index", "0.log", "notes.txt", "00000000000000000000.log.tmp"):
        assert layout.parse_segment_name(name) is None and layout.parse_temp_name(name) is None


#: Modules that find their way around a data directory; only storage.layout may spell a name.
USERS = [
    "storage/cleaner.py", "storage/coordinator_log.py", "storage/history.py", "storage/partition.py",
    "storage/segment.py", "storage/fs.py", "storage/journal.py", "storage/maintenance.py",
    "storage/group_commit.py", "broker/topics.py", "broker/producers.py", "broker/server.py",
    "broker/group_service.py", "broker/data_service.py", "pipeline/segments.py", "pipeline/history.py",
    "storage/security_log.py", "broker/security_service.py",
]
SPELLED = re.compile(
    r"""["'](?:\.lock|__consumer_offsets|topics\.json|producer_ids\.json|history|\.meta\.json|[^"']*\.meta\.json|\.log"""
    r"""|\.cleaned|\.swap|\.tmp|[^"']*\{[^}]*:020d\}[^"']*)["']"""
)


@pytest.mark.parametrize("module", USERS)
def test_no_other_module_spells_a_data_directory_name(module: str) -> None:
    source = (REPO / module).read_text()
    code = re.sub(r'"""(?:.|\n)*?"""', "", source)  # docstrings may describe the layout
    found = SPELLED.findall(code)
    assert found == [], f"{module} spells {found}; use storage.layout"
