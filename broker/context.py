"""What every handler may know about the broker it runs in."""

from __future__ import annotations

from dataclasses import dataclass

from broker.config import Config
from broker.placement import SINGLE_NODE, BrokerEndpoint, Placement


@dataclass(frozen=True, slots=True)
class BrokerContext:
    config: Config
    node_id: int
    host: str  # advertised
    port: int  # advertised
    cluster_id: str
    listener: str = "PLAINTEXT"
    #: Who leads what: this process alone, or a cluster (broker.placement).
    placement: Placement = SINGLE_NODE

    @property
    def me(self) -> BrokerEndpoint:
        """This node's own address on this listener."""
        return BrokerEndpoint(self.node_id, self.host, self.port)
