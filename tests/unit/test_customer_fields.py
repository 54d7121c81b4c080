"""The customer's fields are declared once (cs_daemon/customers/fields.py): every list
of them derives from it, each is a column of `customers`, and the customer API shows
them all."""

from __future__ import annotations

from cs_daemon.channels import crm
from cs_daemon.customers import bulk, fields, snapshots, state
from cs_daemon.customers.models import Customer
from cs_daemon.customers.schemas import CustomerPublic
from cs_daemon.decisions import record
from cs_daemon.engine import conditions
from cs_daemon.integrations import llm


def test_every_field_is_a_customer_column_and_every_subset_a_part_of_the_declaration():
    columns = set(Customer.__table__.columns.keys())
    assert set(fields.ALL) <= columns
    for subset in (fields.IDENTITY, fields.SCORES, fields.STANDING, fields.COMPARED):
        assert set(subset) <= set(fields.ALL)
    assert set(fields.FIELDS.values()) == {"text", "number", "time"}


def test_the_lists_that_were_written_out_by_hand_are_the_same_as_before():
    assert record.USER_FIELDS == ("name", "email", "company", "role", "team_size", "locale", "lifecycle_stage",
                                  "health", "activation_score", "engagement_score", "expansion_score",
                                  "risk_level", "last_activity_at")
    assert crm.FIELDS == ("id", "name", "email", "company", "role", "team_size", "locale", "lifecycle_stage",
                          "health", "activation_score", "engagement_score", "expansion_score", "risk_level")
    assert llm.USER_FIELDS == ("name", "company", "role", "team_size", "lifecycle_stage", "health",
                               "activation_score", "engagement_score", "expansion_score", "risk_level",
                               "last_activity_at")      # never the email address or other identifiers
    assert conditions.COLUMN_FIELDS == {
        "name": "text", "email": "text", "company": "text", "role": "text", "locale": "text",
        "lifecycle_stage": "text", "risk_level": "text", "team_size": "number", "health": "number",
        "activation_score": "number", "engagement_score": "number", "expansion_score": "number"}
    assert state.IDENTITY_FIELDS == ("name", "email", "company", "role", "team_size")
    assert snapshots.COLUMNS == ("health", "activation_score", "engagement_score", "expansion_score",
                                 "lifecycle_stage", "risk_level")


def test_the_customer_api_shows_every_field():
    assert set(fields.ALL) <= set(CustomerPublic.model_fields)


def test_ingest_reads_and_writes_columns_derived_from_the_declaration():
    """customers/bulk.py: what a re-score reads and writes back, from fields.py and the
    model's column types (the lists it wrote out by hand, in their order or not)."""
    assert bulk.READ == ("id", "name", "email", "company", "role", "team_size", "locale", "traits",
                         "lifecycle_stage", "risk_level", "created_at", "scored_at", "state")
    assert dict(bulk.WRITE) == {
        "name": "text", "email": "text", "company": "text", "role": "text", "team_size": "int", "locale": "text",
        "traits": "json", "lifecycle_stage": "text", "risk_level": "text", "health": "float8",
        "activation_score": "float8", "engagement_score": "float8", "expansion_score": "float8",
        "last_activity_at": "timestamptz", "scored_at": "timestamptz", "updated_at": "timestamptz", "state": "json"}
    assert set(fields.ALL) <= set(dict(bulk.WRITE)) and len(bulk.WRITE) == len(dict(bulk.WRITE))
    row = bulk.CustomerRow(id="u")
    assert all(hasattr(row, name) for name in (*bulk.READ, *dict(bulk.WRITE)))
