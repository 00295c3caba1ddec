"""A strict reader of the Prometheus text format 0.0.4, and a scraper, for tests."""

from __future__ import annotations

import math
import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')
_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "counter": ("",), "gauge": ("",)}

Labels = tuple[tuple[str, str], ...]


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "\\": "\\", '"': '"'}[m.group(1)], text)


def _value(text: str) -> float:
    return {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}.get(text) or float(text)


@dataclass
class Exposition:
    """Samples keyed by (sample name, labels), and each family's type and help."""

    samples: dict[tuple[str, Labels], float] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    helps: dict[str, str] = field(default_factory=dict)

    def get(self, name: str, **labels: str) -> float:
        """One sample's value; 0 when the series is absent (a counter not yet incremented)."""
        return self.samples.get((name, tuple(sorted(labels.items()))), 0.0)

    def series(self, name: str) -> dict[Labels, float]:
        return {labels: v for (n, labels), v in self.samples.items() if n == name}


def parse(text: str) -> Exposition:
    """Parse, asserting the rules: HELP then TYPE before a family's samples, known types,
    sample names that belong to the declared family, no duplicate series."""
    out = Exposition()
    assert text.endswith("\n"), "the exposition ends with a newline"
    current: str | None = None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            assert name not in out.helps, f"HELP for {name} twice"
            out.helps[name] = help_text
            current = None
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            assert kind in _SUFFIXES, line
            assert name in out.helps and name not in out.types, f"TYPE for {name} without HELP or twice"
            out.types[name] = kind
            current = name
        else:
            match = _SAMPLE.match(line)
            assert match, f"not a sample line: {line!r}"
            name, _, inner, value = match.groups()
            assert current is not None and any(name == current + s for s in _SUFFIXES[out.types[current]]), \
                f"{name} outside its family (current {current})"
            labels: list[tuple[str, str]] = []
            if inner:
                pos = 0
                while pos < len(inner):
                    label = _LABEL.match(inner, pos)
                    assert label, f"bad labels in {line!r}"
                    labels.append((label.group(1), _unescape(label.group(2))))
                    pos = label.end()
            key = (name, tuple(sorted(labels)))
            assert key not in out.samples, f"duplicate series {line!r}"
            out.samples[key] = _value(value)
    return out


def fetch(url: str, method: str = "GET", timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def scrape(base: str) -> Exposition:
    status, headers, body = fetch(base + "/metrics")
    assert status == 200, (status, body)
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    return parse(body.decode())
