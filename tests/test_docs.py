"""docs/ stays true: the tables there are checked against the code."""

from __future__ import annotations

import re
from pathlib import Path

from broker.config import REFERENCE_DOCS, Config, reference_markdown
from protocol.messages import REQUESTS

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_configuration_reference_lists_every_key() -> None:
    for name in REFERENCE_DOCS:
        text = (DOCS / name).read_text()
        assert text.endswith(reference_markdown()), f"docs/{name} is stale: run python -m broker.config"


def _served_by_a_real_server() -> dict[int, object]:
    """The APIs a fully wired server registers (the server wires handlers at start-up)."""
    import tempfile

    import trio

    from broker.server import Server

    async def main() -> dict[int, object]:
        with tempfile.TemporaryDirectory() as data_dir:
            server = Server(Config(), "127.0.0.1", 0, Path(data_dir))
            async with trio.open_nursery() as nursery:
                await nursery.start(server.serve)
                served = dict(server.router.served)
                server.shutdown()
            return served

    return trio.run(main)


def test_protocol_table_matches_declarations_and_router() -> None:
    text = (DOCS / "protocol.md").read_text()
    rows = {
        int(m.group(2)): (m.group(1), m.group(3), m.group(4))
        for m in re.finditer(r"^\| (\w+) \| (\d+) \| ([\d-]+) \| ([\w-]+) \|", text, re.M)
    }
    served = _served_by_a_real_server()
    assert set(rows) == set(REQUESTS)
    for key, message in REQUESTS.items():
        name, declared, serving = rows[key]
        assert name + "Request" == message.name
        assert declared == f"{message.min_version}-{message.max_version}".replace("0-0", "0")
        if key in served:
            m = served[key]
            expected = str(m.min_version) if m.min_version == m.max_version else f"{m.min_version}-{m.max_version}"
            assert serving == expected, name
        else:
            assert serving == "no", f"{name} is documented as served but has no handler"
