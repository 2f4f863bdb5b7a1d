"""Thin adapters from hindsight_core to agent frameworks; no SQL, no ranking here."""
