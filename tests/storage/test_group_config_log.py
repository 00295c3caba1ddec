"""The group config log: what was appended and flushed is replayed, in order, after a reopen."""

from __future__ import annotations

from pathlib import Path

from storage.group_config_log import GroupConfigLog
from storage.layout import group_configs_partition_dir


def test_records_survive_a_reopen_in_log_order(tmp_path: Path) -> None:
    log = GroupConfigLog(tmp_path)
    log.append([(b'["group","a"]', b'{"x":"1"}')], 1)
    log.append([(b'["group","b"]', b'{"y":"2"}'), (b'["group","a"]', None)], 2)
    log.flush()
    log.close()
    assert group_configs_partition_dir(tmp_path).is_dir()
    reopened = GroupConfigLog(tmp_path)
    assert list(reopened.replay()) == [
        (b'["group","a"]', b'{"x":"1"}'), (b'["group","b"]', b'{"y":"2"}'), (b'["group","a"]', None)]
    reopened.close()
