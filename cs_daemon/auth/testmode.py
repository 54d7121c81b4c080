"""Test mode is a boundary for writing (docs/api.md, "Test mode"): an `rt_test_` key reads
everything, but changes only test data.

One rule for every request that is not a read, applied where the request enters (the
endpoint declarations run it before the handler, so nothing is changed and the refusal
comes before any other answer about the object):

- an object named in the path that carries `test` may be changed by a test key only when
  it is `test: true`;
- an object named in the path that carries no `test` (a webhook endpoint, an action type,
  a platform, a team member, an integration) is the tenant's live configuration, and so
  is what an endpoint declares it configures without naming it (settings, billing, a new
  webhook endpoint or action type, provisioning): a test key may not change either.

Keys minted through the API are the one body-dependent case: `may_mint` below.
"""

from __future__ import annotations

import re

from sqlalchemy.orm import Session

from ..delivery.models import Delivery
from ..errors import Forbidden
from ..external.models import ExternalAction
from ..interventions.models import Intervention
from ..playbooks.models import Playbook
from ..team.models import Invitation
from .models import ApiKey

REFUSAL = "a test key cannot change live data"

# What an id in a request path names: the objects that can be test data. A path id not
# listed names live configuration.
NAMED_BY: dict[str, type] = {
    "intervention_id": Intervention,
    "escalation_id": Intervention,
    "action_id": ExternalAction,
    "playbook_id": Playbook,
    "key_id": ApiKey,
    "delivery_id": Delivery,
    "invitation_id": Invitation,
}


def require_test_data(session: Session, *, test_key: bool, path_ids: dict[str, str],
                      configures: bool = False) -> None:
    """Forbidden when a test key would change live data through this request. A path id
    that names nothing is left to the handler (its 404)."""
    if not test_key:
        return
    if configures:
        raise Forbidden(REFUSAL)
    for name, value in path_ids.items():
        model = NAMED_BY.get(name)
        if model is None:
            raise Forbidden(REFUSAL)
        found = session.get(model, value)
        if found is not None and not found.test:
            raise Forbidden(REFUSAL)


def describe(path: str, *, configures: bool = False) -> str:
    """What a test key may do through a write endpoint (for the OpenAPI document)."""
    names = re.findall(r"{(\w+)}", path)
    if configures or any(name not in NAMED_BY for name in names):
        return "refused: live configuration"
    return "test data only" if names else "allowed; what it makes is test data"


def may_mint(*, test_key: bool, live_key: bool) -> None:
    """A test key mints and revokes test keys only (revoking goes through the path rule)."""
    if test_key and live_key:
        raise Forbidden("a test key cannot mint live (rt_live_) keys")
