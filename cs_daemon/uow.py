"""The unit of work a session carries: what the services of one transaction share
besides the connection (docs/architecture.md, "The unit of work and domain events").

`session_scope` (cs_daemon/db.py) opens one per session with the settings and the
tenant; authentication adds the tenant's row; services add the work to run once the
transaction has committed; `domain_events.publish` records the domain events of the
transaction. `uow_of(session)` is the one way to reach it: no service reads or writes
`session.info` itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from sqlalchemy.orm import Session

from .config import Settings

_KEY = "uow"


@dataclass(eq=False)
class UnitOfWork:
    # the tenant every query of the session is limited to (None: not limited)
    tenant_id: str | None = None
    # the process's settings, for work that needs them (in-app wake-ups, credentials)
    settings: Settings | None = None
    # the tenant's row as the key memo remembered it (a mapping of its columns, not to be
    # changed), until something needs it as an ORM row (`tenant`)
    remembered: Mapping[str, Any] | None = None
    _tenant: Any = None
    _make_tenant: Callable[[], Any] | None = None
    # (fn, args) to run once the transaction has committed, in order (dropped on rollback)
    after_commit: list[tuple[Callable, tuple]] = field(default_factory=list)
    # for `collect` (db.on_commit_each, the after-commit handlers of domain events): the
    # items collected per function, sent in one call each
    after_commit_items: dict[Callable, list] = field(default_factory=dict)
    # the domain events published in the transaction under way, in order
    # (cs_daemon/domain_events.py; dropped as it commits or rolls back)
    events: list[object] = field(default_factory=list)

    @property
    def tenant(self) -> Any:
        """The tenant's row (tenants.models.Tenant) when authentication read it in this
        session, kept in the identity map so settings reads need no query. One the key memo
        remembered joins the session here, at its first use (`remember`): a request that
        only needs some columns of it (ingest) reads them with `tenant_columns` instead."""
        if self._make_tenant is not None:
            make, self._make_tenant = self._make_tenant, None
            self._tenant = make()
        return self._tenant

    @tenant.setter
    def tenant(self, row: Any) -> None:
        self._tenant, self._make_tenant, self.remembered = row, None, None

    def remember(self, columns: Mapping[str, Any], make: Callable[[], Any]) -> None:
        """The tenant's row is `columns`, made an ORM row by `make()` when first needed."""
        self._tenant, self._make_tenant, self.remembered = None, make, columns

    def tenant_columns(self, tenant_id: str, *names: str) -> tuple | None:
        """These columns of tenant `tenant_id`'s row as authentication read it in this
        session (as changed since, once it is an ORM row), without making the key memo's
        columns a row; None when authentication read no row of that tenant."""
        if self._make_tenant is not None and self.remembered is not None:
            if self.remembered["id"] != tenant_id:
                return None
            return tuple(self.remembered[name] for name in names)
        if self._tenant is None or getattr(self._tenant, "id", None) != tenant_id:
            return None
        return tuple(getattr(self._tenant, name) for name in names)

    @property
    def tenant_made(self) -> Any:
        """The tenant's ORM row if the session has it already (None while the key memo's
        columns wait to be made one, or when authentication read none)."""
        return self._tenant

    def collect(self, fn: Callable, item, *rest) -> None:
        """Add `item` to what `fn` gets once the transaction has committed: one call,
        `fn(items, *rest)`, with every item collected for `fn` in the transaction, at the
        place of the first one in the after-commit order (`rest`: as given first)."""
        items = self.after_commit_items.get(fn)
        if items is None:
            items = self.after_commit_items[fn] = []
            self.after_commit.append((fn, (items, *rest)))
        items.append(item)

    def forget(self) -> None:
        """The transaction rolled back: nothing of it is to run or to tell."""
        self.after_commit = []
        self.after_commit_items = {}
        self.events = []

    def committed(self) -> list[tuple[Callable, tuple]]:
        """The after-commit work, handed over once (the unit of work keeps none of it)."""
        callbacks, self.after_commit, self.after_commit_items, self.events = self.after_commit, [], {}, []
        return callbacks


def uow_of(session: Session) -> UnitOfWork:
    """The session's unit of work (an empty one, kept, for a session opened without
    `session_scope`: not tenant-scoped, no settings)."""
    uow = session.info.get(_KEY)
    if uow is None:
        uow = session.info[_KEY] = UnitOfWork()
    return uow


def begin(session: Session, tenant_id: str | None, settings: Settings | None, *,
          after_commit: list | None = None) -> UnitOfWork:
    """Give `session` its unit of work. `after_commit`: a list shared with another unit of
    work, whose transaction this session's joins (partners/service.py)."""
    uow = session.info[_KEY] = UnitOfWork(tenant_id=tenant_id, settings=settings)
    if after_commit is not None:
        uow.after_commit = after_commit
    return uow
