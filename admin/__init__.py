"""Operator tooling that speaks the Kafka protocol to any broker: ``kcoord groups`` and ``kcoord offsets``."""
