"""Alembic environment: one history for SQLite and PostgreSQL. The engine comes from
the service settings (`cs db upgrade`), or from DATABASE_URL when run as `alembic`."""

from alembic import context

from cs_daemon.models import metadata


def render_item(type_, obj, autogen_context):
    """Render the service's column types as plain SQLAlchemy ones in new migrations."""
    if type_ == "type":
        name = type(obj).__name__
        if name == "AutoString":
            return f"sa.String(length={obj.length})" if obj.length else "sa.String()"
        if name == "UTCDateTime":
            return "sa.DateTime(timezone=True)"
    return False


def run() -> None:
    cfg = context.config
    engine = cfg.attributes.get("engine")
    if engine is None:
        from cs_daemon.config import load_settings
        from cs_daemon.db import get_engine

        engine = get_engine(load_settings())
    with engine.connect() as conn:
        context.configure(
            connection=conn,
            target_metadata=metadata,
            render_as_batch=conn.dialect.name == "sqlite",
            compare_type=True,
            render_item=render_item,
        )
        with context.begin_transaction():
            context.run_migrations()
        conn.commit()


run()
