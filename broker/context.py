"""What every handler may know about the broker it runs in."""

from __future__ import annotations

from dataclasses import dataclass

from broker.config import Config


@dataclass(frozen=True, slots=True)
class BrokerContext:
    config: Config
    node_id: int
    host: str  # advertised
    port: int  # advertised
    cluster_id: str
