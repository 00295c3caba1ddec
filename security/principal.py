"""Principals: ``User:alice``, and the mapping from a client certificate's name to one.

A principal is written ``Type:name`` as in Kafka's ``KafkaPrincipal.toString``. SSL
principals come from the certificate's distinguished name (RFC 2253) through
``ssl.principal.mapping.rules``, as Kafka's ``SslPrincipalMapper``: ``DEFAULT`` keeps the
name as it is; ``RULE:pattern/replacement/[LU]`` rewrites it when the pattern matches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

USER = "User"


@dataclass(frozen=True, slots=True)
class Principal:
    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> Principal:
        """``Type:name``; a ValueError when there is no colon or either side is empty."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"could not parse principal {text!r}: expected Type:name")
        return cls(kind, name)


ANONYMOUS = Principal(USER, "ANONYMOUS")


def user(name: str) -> Principal:
    return Principal(USER, name)


# ---------------------------------------------------------------------- ssl.principal.mapping.rules

_RULE = re.compile(r"\s*RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?)(?:,|$)|\s*DEFAULT\s*(?:,|$)")


@dataclass(frozen=True, slots=True)
class MappingRule:
    """One rule; ``pattern`` None is DEFAULT (the name unchanged)."""

    pattern: re.Pattern[str] | None
    replacement: str = ""
    case: str = ""  # "L" lower-case the result, "U" upper-case it

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        match = self.pattern.fullmatch(name)
        if match is None:
            return None
        # Kafka's replacement uses $1; Python's re uses \1.
        result = match.expand(re.sub(r"\$(\d+)", r"\\\1", self.replacement))
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


def parse_mapping_rules(text: str) -> tuple[MappingRule, ...]:
    """Kafka's ``ssl.principal.mapping.rules`` syntax; a ValueError names what is wrong."""
    rules: list[MappingRule] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _RULE.match(text, pos)
        if match is None or match.end() == pos:
            raise ValueError(f"ssl.principal.mapping.rules: cannot parse {text[pos:]!r}")
        if match.group(1) is None:
            rules.append(MappingRule(None))
        else:
            pattern = match.group(1).replace("\\/", "/")
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"ssl.principal.mapping.rules: bad pattern {pattern!r}: {exc}") from None
            rules.append(MappingRule(compiled, match.group(2).replace("\\/", "/"), match.group(3)))
        pos = match.end()
    return tuple(rules) or (MappingRule(None),)


def map_certificate_name(rules: tuple[MappingRule, ...], distinguished_name: str) -> Principal:
    """The principal of a client certificate: the first rule that applies; none: the name as is."""
    for rule in rules:
        mapped = rule.apply(distinguished_name)
        if mapped is not None:
            return user(mapped)
    return user(distinguished_name)


def rfc2253(subject: tuple[tuple[tuple[str, str], ...], ...]) -> str:
    """The distinguished name of ``ssl.SSLSocket.getpeercert()['subject']``, as Java prints it.

    Java's ``X500Principal.getName()`` lists the relative names last-first, joined by commas,
    with RFC 2253 escapes.
    """
    short = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
             "countryName": "C", "stateOrProvinceName": "ST", "localityName": "L",
             "domainComponent": "DC", "streetAddress": "STREET", "userId": "UID"}

    def escape(value: str) -> str:
        out = re.sub(r'([,+"\\<>;=])', r"\\\1", value)
        if out.startswith((" ", "#")):
            out = "\\" + out
        if out.endswith(" "):
            out = out[:-1] + "\\ "
        return out

    parts = []
    for rdn in reversed(subject):
        parts.append("+".join(f"{short.get(key, key)}={escape(value)}" for key, value in rdn))
    return ",".join(parts)
