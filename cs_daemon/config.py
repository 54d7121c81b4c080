"""Settings, read from the environment (and an optional `.env`) once per process.

The run mode follows from two settings only: without `DATABASE_URL` the data lives in a
SQLite file under `CS_DATA_DIR`; without `REDIS_URL` jobs, cache and rate limits stay in
this process (the embedded mode). docs/configuration.md lists every setting.
"""

from __future__ import annotations

import ipaddress
import secrets
import sys
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from . import config_values as values
from .billing.prices import parse_prices


# the optional settings checked only when set, each by its check in config_values
CHECKED_WHEN_SET = {
    "database_url": values.database_url,
    "redis_url": values.redis_url,
    "smtp_url": values.smtp_url,
    "openai_base_url": values.http_url,
    "stripe_api_base": values.http_url,
    "stripe_secret_key": lambda value: values.prefixed(value, ("sk_", "rk_"), "a Stripe secret or restricted key"),
    "stripe_webhook_secret": lambda value: values.prefixed(value, ("whsec_",), "a Stripe webhook signing secret"),
}


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
    cs_api_threads: int = Field(12, ge=1, le=256)   # request threads per API process (docs/deploy.md)
    cs_client_timeout_seconds: float = Field(30, ge=0.1, le=3600)   # a request's reads and writes (docs/deploy.md)
    cs_stream_slots: int = Field(10_000, ge=1, le=50_000)   # open in-app streams per API process
    cs_stream_heartbeat_seconds: float | None = Field(None, ge=0.1, le=300)   # default 15 (in_app_stream.py)
    cs_stream_tenant_share: int = Field(50, ge=1, le=100)   # % of CS_STREAM_SLOTS one tenant may hold
    cs_streams_per_token: int = Field(5, ge=1, le=1000)     # open streams of one stream token, per process
    cs_address_rate_limit: int = Field(600, ge=1, le=1_000_000)   # a minute, per address, per keyless endpoint
    cs_health_rate_limit: int = Field(1200, ge=1, le=1_000_000)   # a minute, per address, GET /api/health
    cs_trusted_proxies: Annotated[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...], NoDecode] = ()
    cs_worker_processes: int = Field(1, ge=1, le=64)
    cs_worker_threads: int = Field(4, ge=1, le=256)
    cs_segment_work_mem_mb: int = Field(64, ge=4, le=4096)   # PostgreSQL work_mem of segment counts and sweeps
    cs_log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    cs_log_format: Literal["text", "json"] = "text"
    cs_metrics_token: str | None = None   # GET /metrics wants it as a bearer token; unset: /metrics is 404

    @field_validator("database_url", "redis_url", "smtp_url", "smtp_ca_file", "openai_base_url", "openai_api_key",
                     "openai_model", "stripe_secret_key", "stripe_api_base", "stripe_webhook_secret",
                     "allow_private_webhook_urls", "cs_secret_key", "cs_metrics_token", mode="before")
    @classmethod
    def _empty_is_unset(cls, value):
        """`NAME=` in the environment or `.env` means the setting is not set."""
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator(*CHECKED_WHEN_SET)
    @classmethod
    def _checked_when_set(cls, value: str | None, info: ValidationInfo) -> str | None:
        return value and CHECKED_WHEN_SET[info.field_name](value)

    @field_validator("mail_from")
    @classmethod
    def _mail_from(cls, value: str) -> str:
        return values.mail_from(value)

    @field_validator("smtp_ca_file")
    @classmethod
    def _smtp_ca_file(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError("no such file (a PEM bundle of the CAs to trust for SMTP TLS)")
        return value

    @field_validator("cs_public_url")
    @classmethod
    def _public_url(cls, value: str) -> str:
        return values.http_url(value).rstrip("/")

    @field_validator("stripe_return_url")
    @classmethod
    def _return_url(cls, value: str) -> str:
        return values.http_url(value)


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

    @field_validator("cs_log_level", mode="before")
    @classmethod
    def _log_level(cls, value):
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("cs_log_format", mode="before")
    @classmethod
    def _log_format(cls, value):
        return value.strip().lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _fit_together(self) -> "Settings":
        """Checks that read more than one setting; each names the one to change."""
        if self.production and not self.cs_secret_key:
            raise SettingsError("CS_SECRET_KEY: required when REDIS_URL is set (every process must share it)")
        try:
            values.data_dir(self.cs_data_dir, used=self.uses_data_dir)
        except ValueError as exc:
            raise SettingsError(f"CS_DATA_DIR: {exc}") from None
        return self

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
        """CS_SECRET_KEY, or in the embedded mode one kept in the data directory (production
        mode requires the setting: see `_fit_together`)."""
        if self.cs_secret_key:
            return self.cs_secret_key
        path = self.cs_data_dir / "secret.key"
        if not path.exists():
            self.ensure_data_dir()
            path.write_text(secrets.token_hex(32))
            path.chmod(0o600)
        return path.read_text().strip()

    @property
    def uses_data_dir(self) -> bool:
        """The SQLite file or the made secret key live in CS_DATA_DIR."""
        return self.database_url is None or self.cs_secret_key is None

    def ensure_data_dir(self) -> None:
        """Make the data folder; one the checks passed but the system refuses (as root,
        a place such as /proc, where nothing can be made) is a bad setting all the same."""
        if self.uses_data_dir:
            try:
                self.cs_data_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise SettingsError(f"CS_DATA_DIR: cannot be made: {exc.strerror or exc}") from None


def load_settings(**overrides) -> Settings:
    """Read the settings; a bad value raises SettingsError naming the variable."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]).upper() if err["loc"] else "settings"
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise SettingsError(f"{name}: {msg}") from None


BAD_SETTING_EXIT = 2


def load_settings_or_exit(code: int = BAD_SETTING_EXIT) -> Settings:
    """For processes started without `cs` (gunicorn, dramatiq): a bad setting is one line
    on stderr and exit code 2 (or `code`), as `cs` does, instead of a traceback."""
    try:
        return load_settings()
    except SettingsError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.stderr.flush()
        raise SystemExit(code) from None
