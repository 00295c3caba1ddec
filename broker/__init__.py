"""The kcoord broker: a thin trio shell around the sans-IO protocol and coordinator."""
