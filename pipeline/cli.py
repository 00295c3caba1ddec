"""``kcoord pipeline``."""

from __future__ import annotations

from typing import Any


def register(sub: Any) -> None:
    """Add the pipeline subcommands to the ``kcoord`` parser."""
    del sub
