"""``kcoord groups`` and ``kcoord offsets``."""

from __future__ import annotations

from typing import Any


def register(sub: Any) -> None:
    """Add the admin subcommands to the ``kcoord`` parser."""
    del sub
