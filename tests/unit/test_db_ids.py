"""db.new_ids: the ids of a batch of events, made in one go."""

import uuid

from cs_daemon.db import new_ids


def test_new_ids_are_distinct_version_4_uuids_as_new_id_writes_them():
    ids = new_ids(500)
    assert len(set(ids)) == 500
    for text in ids:
        parsed = uuid.UUID(text)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122 and str(parsed) == text
    assert new_ids(0) == []
