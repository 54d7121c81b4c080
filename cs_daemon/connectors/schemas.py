"""Answers of the connector endpoints: ours, and each platform's native one."""

from __future__ import annotations

from ..schemas import Wire


class ConnectorResult(Wire):
    accepted: int
    users_upserted: int


class SegmentAnswer(Wire):
    success: bool = True


class MixpanelAnswer(Wire):
    status: int = 1
    error: str | None = None


class AmplitudeAnswer(Wire):
    code: int = 200
    events_ingested: int
    payload_size_bytes: int
    server_upload_time: int
