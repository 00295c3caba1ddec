"""Shared test helpers: a real broker process and a raw-protocol client."""
