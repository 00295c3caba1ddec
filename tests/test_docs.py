"""docs/ stays true: the tables there are checked against the code."""

from __future__ import annotations

import re
from pathlib import Path

from broker import topic_configs
from broker.config import REFERENCE_DOCS, Config, reference_markdown
from protocol.messages import REQUESTS

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_configuration_reference_lists_every_key() -> None:
    for name in REFERENCE_DOCS:
        text = (DOCS / name).read_text()
        assert text.endswith(reference_markdown()), f"docs/{name} is stale: run python -m broker.config"


def test_configuration_reference_lists_every_topic_config() -> None:
    text = (DOCS / "configuration.md").read_text()
    assert topic_configs.reference_markdown() in text, "docs/configuration.md is stale: run python -m broker.config"


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


# --------------------------------------------------------------------------- anchors

REPO = DOCS.parent
RULES = DOCS / "coordinator-rules.md"


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a markdown file (code blocks skipped)."""
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    return {
        re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)
    }


def test_coordinator_rules_lists_the_anchor_of_every_section() -> None:
    text = RULES.read_text()
    listed = re.findall(r"^\| \[`#([\w-]+)`\]\(#\1\) \|", text, re.M)
    sections = {
        re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        for m in re.finditer(r"^#{2,3} (.+)$", text, re.M)
    }
    assert sorted(listed) == sorted(sections)


def test_citations_of_coordinator_rules_name_real_sections() -> None:
    anchors = _anchors(RULES)
    cited = {
        (str(path.relative_to(REPO)), anchor)
        for folder in ("broker", "protocol", "storage", "pipeline", "tests", "docs")
        for path in (REPO / folder).rglob("*")
        if path.suffix in {".py", ".md"}
        for anchor in re.findall(r"coordinator-rules\.md#([\w-]+)", path.read_text())
    }
    assert cited, "nothing cites docs/coordinator-rules.md"
    assert {(where, a) for where, a in cited if a not in anchors} == set()


def test_links_between_docs_land_on_headings() -> None:
    broken = []
    for doc in [REPO / "README.md", *sorted(DOCS.glob("*.md"))]:
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md)?#([\w-]+)\)", doc.read_text()):
            if anchor not in _anchors((doc.parent / target).resolve() if target else doc):
                broken.append(f"{doc.relative_to(REPO)}: {target}#{anchor}")
    assert broken == []
