"""The Prometheus text format read by prometheus-client's own parser, and a scraper, for tests."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "counter": ("_total",), "gauge": ("",)}

Labels = tuple[tuple[str, str], ...]


@dataclass
class Exposition:
    """Samples keyed by (sample name, labels), and each family's type and help.

    Families are keyed by the name the exposition shows in its TYPE line: a counter with
    its ``_total`` (prometheus-client's parser keeps the family name without it).
    """

    samples: dict[tuple[str, Labels], float] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    helps: dict[str, str] = field(default_factory=dict)

    def get(self, name: str, **labels: str) -> float:
        """One sample's value; 0 when the series is absent (a counter not yet incremented)."""
        return self.samples.get((name, tuple(sorted(labels.items()))), 0.0)

    def series(self, name: str) -> dict[Labels, float]:
        return {labels: v for (n, labels), v in self.samples.items() if n == name}


def parse(text: str) -> Exposition:
    """Parse with prometheus-client's own text parser, asserting what it lets pass: each
    family declared once with a known type, each sample inside its family, no duplicate series."""
    out = Exposition()
    assert text.endswith("\n"), "the exposition ends with a newline"
    for family in text_string_to_metric_families(text):
        name = family.name + "_total" if family.type == "counter" else family.name
        assert family.type in _SUFFIXES, (name, family.type)
        assert name not in out.types, f"family {name} declared twice"
        out.types[name] = family.type
        out.helps[name] = family.documentation
        for sample in family.samples:
            assert any(sample.name == family.name + s for s in _SUFFIXES[family.type]), \
                f"{sample.name} outside its family {name}"
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in out.samples, f"duplicate series {key}"
            out.samples[key] = sample.value
    return out


def fetch(url: str, method: str = "GET", timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, _lower(response.headers.items()), response.read()
    except urllib.error.HTTPError as error:
        return error.code, _lower(error.headers.items()), error.read()


def _lower(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Header names in lower case (HTTP/1.1 treats them case-insensitively)."""
    return {name.lower(): value for name, value in headers}


def scrape(base: str) -> Exposition:
    status, headers, body = fetch(base + "/metrics")
    assert status == 200, (status, body)
    assert headers["content-type"].startswith("text/plain; version="), headers
    return parse(body.decode())
