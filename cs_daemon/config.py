"""Settings, read from the environment (and an optional `.env`) once per process.

The run mode follows from two settings only: without `DATABASE_URL` the data lives in a
SQLite file under `CS_DATA_DIR`; without `REDIS_URL` jobs, cache and rate limits stay in
this process (the embedded mode). docs/configuration.md lists every setting.
"""

from __future__ import annotations

import ipaddress
import secrets
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from .billing.prices import parse_prices


class SettingsError(Exception):
    """A setting has a bad value; the message is one line naming it."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore", frozen=True)

    cs_data_dir: Path = Path(".cs-data")
    database_url: str | None = None
    redis_url: str | None = None
    cs_redis_prefix: str = Field("cs", pattern=r"^[A-Za-z0-9_.:-]+$")
    smtp_url: str | None = None
    mail_from: str = "Customer Success <cs@localhost>"
    smtp_ca_file: Path | None = None
    cs_public_url: str = "http://127.0.0.1:8000"
    openai_base_url: str | None = None
    openai_api_key: str | None = None
    openai_model: str | None = None
    stripe_secret_key: str | None = None
    stripe_api_base: str | None = None
    stripe_webhook_secret: str | None = None
    stripe_prices: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)  # JSON {"growth_monthly": "price_…"}
    stripe_return_url: str = "http://127.0.0.1:8000/"  # where Checkout and the billing portal send the customer back
    allow_private_webhook_urls: bool | None = None
    cs_secret_key: str | None = None
    cs_web_processes: int = Field(2, ge=1, le=64)
    cs_stream_slots: int = Field(1000, ge=1, le=10_000)   # open in-app streams per API process
    cs_stream_tenant_share: int = Field(50, ge=1, le=100)   # % of CS_STREAM_SLOTS one tenant may hold
    cs_streams_per_token: int = Field(5, ge=1, le=1000)     # open streams of one stream token, per process
    cs_address_rate_limit: int = Field(600, ge=1, le=1_000_000)   # a minute, per address, per keyless endpoint
    cs_health_rate_limit: int = Field(1200, ge=1, le=1_000_000)   # a minute, per address, GET /api/health
    cs_trusted_proxies: Annotated[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...], NoDecode] = ()
    cs_worker_processes: int = Field(1, ge=1, le=64)
    cs_worker_threads: int = Field(4, ge=1, le=256)
    cs_segment_work_mem_mb: int = Field(64, ge=4, le=4096)   # PostgreSQL work_mem of segment counts and sweeps
    cs_log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        if not value:
            return None
        for plain in ("postgres://", "postgresql://"):
            if value.startswith(plain):
                return "postgresql+psycopg://" + value[len(plain):]
        if value.startswith(("postgresql+psycopg://", "sqlite://")):
            return value
        raise ValueError("must be a postgresql:// (psycopg) or sqlite:// URL")

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if not value:
            return None
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must be a redis:// or rediss:// URL")
        return value

    @field_validator("smtp_url")
    @classmethod
    def _smtp_url(cls, value: str | None) -> str | None:
        if value and not value.startswith(("smtp://", "smtps://")):
            raise ValueError("must be an smtp:// or smtps:// URL")
        return value or None

    @field_validator("smtp_ca_file", mode="before")
    @classmethod
    def _smtp_ca_file(cls, value):
        if value in (None, ""):
            return None
        if not Path(value).is_file():
            raise ValueError("no such file (a PEM bundle of the CAs to trust for SMTP TLS)")
        return value

    @field_validator("cs_public_url")
    @classmethod
    def _public_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")) or len(value.split("://", 1)[1].strip("/")) == 0:
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("cs_trusted_proxies", mode="before")
    @classmethod
    def _trusted_proxies(cls, value):
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        try:
            return tuple(ipaddress.ip_network(part, strict=False) for part in value or ())
        except ValueError as exc:
            raise ValueError(f"a comma-separated list of addresses or networks (CIDR): {exc}") from None

    @field_validator("stripe_prices", mode="before")
    @classmethod
    def _stripe_prices(cls, value):
        return parse_prices(value)

    @field_validator("stripe_return_url")
    @classmethod
    def _stripe_return_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @property
    def production(self) -> bool:
        """Redis present: separate API and worker processes share broker and cache."""
        return self.redis_url is not None

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.cs_data_dir.resolve() / 'cs.db'}"

    @property
    def is_sqlite(self) -> bool:
        return self.db_url.startswith("sqlite")

    @property
    def llm_configured(self) -> bool:
        return bool(self.openai_model and (self.openai_base_url or self.openai_api_key))

    @property
    def private_webhook_urls_allowed(self) -> bool:
        if self.allow_private_webhook_urls is not None:
            return self.allow_private_webhook_urls
        return not self.production

    @cached_property
    def secret_key(self) -> str:
        """CS_SECRET_KEY, or in the embedded mode one kept in the data directory."""
        if self.cs_secret_key:
            return self.cs_secret_key
        if self.production:
            raise SettingsError("CS_SECRET_KEY: required when REDIS_URL is set (every process must share it)")
        path = self.cs_data_dir / "secret.key"
        if not path.exists():
            self.ensure_data_dir()
            path.write_text(secrets.token_hex(32))
            path.chmod(0o600)
        return path.read_text().strip()

    def ensure_data_dir(self) -> None:
        if self.database_url is None or self.cs_secret_key is None:
            self.cs_data_dir.mkdir(parents=True, exist_ok=True)


def load_settings(**overrides) -> Settings:
    """Read the settings; a bad value raises SettingsError naming the variable."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]).upper() if err["loc"] else "settings"
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise SettingsError(f"{name}: {msg}") from None
