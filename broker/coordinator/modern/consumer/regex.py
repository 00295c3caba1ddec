"""Regular expression subscriptions (KIP-848), with RE2 semantics as Kafka has them.

Kafka matches a subscription regex against every topic name with RE2/J (linear time, no
back-references), the whole name. ``google-re2`` gives the same engine. Resolved topic
sets are cached per pattern and topic-catalogue version, so a group of a thousand members
sharing one pattern resolves it once per change of the catalogue.
"""

from __future__ import annotations

from typing import Any

import re2

from broker.coordinator.modern.topics import MetadataImage

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class RegexCache:
    def __init__(self) -> None:
        self._compiled: dict[str, Any] = {}
        self._resolved: dict[str, tuple[int, frozenset[str]]] = {}

    def _compile(self, pattern: str) -> Any:
        compiled = self._compiled.get(pattern)
        if compiled is None:
            compiled = self._compiled[pattern] = re2.compile(pattern)
        return compiled

    def problem(self, pattern: str) -> str | None:
        """Why ``pattern`` is not a valid RE2 expression, or None."""
        try:
            self._compile(pattern)
        except re2.error as exc:
            return f"SubscribedTopicRegex {pattern!r} is not a valid regular expression: {exc}"
        return None

    def resolve(self, pattern: str, image: MetadataImage) -> frozenset[str]:
        """The non-internal topic names ``pattern`` matches in full."""
        cached = self._resolved.get(pattern)
        if cached is not None and cached[0] == image.version:
            return cached[1]
        compiled = self._compile(pattern)
        names = frozenset(name for name in image.topic_names()
                          if name not in INTERNAL_TOPICS and compiled.fullmatch(name) is not None)
        self._resolved[pattern] = (image.version, names)
        return names
