"""Connectors: drop-in ingestion for the platforms' own SDKs (docs/connectors.md). One module
per platform normalises its payloads to `Incoming` events of the one ingest path."""

from __future__ import annotations

from . import amplitude, mixpanel, segment
from .common import BadPayload

NORMALISERS = {"segment": segment.normalise, "mixpanel": mixpanel.normalise,
               "amplitude": amplitude.normalise}

__all__ = ["BadPayload", "NORMALISERS", "amplitude", "mixpanel", "segment"]
