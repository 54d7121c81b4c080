"""The settings model checks every setting (docs/configuration.md, "Start-up checks"): a
bad value is a SettingsError whose one line names it; good values and empty ones pass.
The real processes are in tests/integration/test_startup_settings.py."""

from __future__ import annotations

import pytest

from cs_daemon.config import SettingsError, load_settings

REDIS = "redis://127.0.0.1:6379/0"
PG = "postgresql://cs@db.internal:5432/cs"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    """Only what a test passes: no service variable of this machine, no `.env` here."""
    import os

    from tests.support.processes import _SERVICE_VARS

    for name in [n for n in os.environ if _SERVICE_VARS.match(n)]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


BAD = [
    ("CS_SECRET_KEY", {"redis_url": REDIS, "database_url": PG}),
    ("CS_SECRET_KEY", {"redis_url": REDIS, "database_url": PG, "cs_secret_key": "  "}),
    ("DATABASE_URL", {"database_url": "mysql://x/y"}),
    ("DATABASE_URL", {"database_url": "postgresql://cs@db:port/cs"}),
    ("DATABASE_URL", {"database_url": "postgresql://cs@db:5432"}),
    ("REDIS_URL", {"redis_url": "http://127.0.0.1:6379", "cs_secret_key": "s"}),
    ("REDIS_URL", {"redis_url": "redis://127.0.0.1:x/0", "cs_secret_key": "s"}),
    ("REDIS_URL", {"redis_url": "redis://", "cs_secret_key": "s"}),
    ("CS_REDIS_PREFIX", {"cs_redis_prefix": "has space"}),
    ("SMTP_URL", {"smtp_url": "mail.example.com:25"}),
    ("SMTP_URL", {"smtp_url": "smtp://:25"}),
    ("SMTP_URL", {"smtp_url": "smtp://mail.example.com:twentyfive"}),
    ("SMTP_URL", {"smtp_url": "smtp://mail.example.com:587?starttls=maybe"}),
    ("SMTP_URL", {"smtp_url": "smtp://mail.example.com:587?tls=1"}),
    ("MAIL_FROM", {"mail_from": "nobody"}),
    ("MAIL_FROM", {"mail_from": "Ops <ops@example.com"}),
    ("MAIL_FROM", {"mail_from": "ops@example.com\r\nBcc: all@example.com"}),
    ("MAIL_FROM", {"mail_from": "a@example.com, c@example.com"}),   # two addresses: parseaddr kept the first
    ("SMTP_CA_FILE", {"smtp_ca_file": "/no/such/ca.pem"}),
    ("CS_PUBLIC_URL", {"cs_public_url": "cs.example.com"}),
    ("CS_PUBLIC_URL", {"cs_public_url": "https://"}),
    ("OPENAI_BASE_URL", {"openai_base_url": "not a url"}),
    ("OPENAI_BASE_URL", {"openai_base_url": "ftp://llm.internal/v1"}),
    ("STRIPE_SECRET_KEY", {"stripe_secret_key": "pk_live_123"}),
    ("STRIPE_API_BASE", {"stripe_api_base": "not a url"}),
    ("STRIPE_WEBHOOK_SECRET", {"stripe_webhook_secret": "secret"}),
    ("STRIPE_PRICES", {"stripe_prices": "{not json"}),
    ("STRIPE_RETURN_URL", {"stripe_return_url": "/billing"}),
    ("ALLOW_PRIVATE_WEBHOOK_URLS", {"allow_private_webhook_urls": "sometimes"}),
    ("CS_WEB_PROCESSES", {"cs_web_processes": "two"}),
    ("CS_WEB_PROCESSES", {"cs_web_processes": "0"}),
    ("CS_STREAM_SLOTS", {"cs_stream_slots": "100000"}),
    ("CS_WORKER_PROCESSES", {"cs_worker_processes": "-1"}),
    ("CS_WORKER_THREADS", {"cs_worker_threads": "1.5"}),
    ("CS_API_THREADS", {"cs_api_threads": "0"}),
    ("CS_CLIENT_TIMEOUT_SECONDS", {"cs_client_timeout_seconds": "0"}),
    ("CS_CLIENT_TIMEOUT_SECONDS", {"cs_client_timeout_seconds": "a minute"}),
    ("CS_SEGMENT_WORK_MEM_MB", {"cs_segment_work_mem_mb": "1"}),
    ("CS_LOG_LEVEL", {"cs_log_level": "LOUD"}),
    ("CS_LOG_FORMAT", {"cs_log_format": "xml"}),
]


@pytest.mark.parametrize("name, values", BAD, ids=[f"{n}-{i}" for i, (n, _) in enumerate(BAD)])
def test_a_bad_value_is_refused_naming_the_setting(monkeypatch, name, values):
    for key, value in values.items():
        monkeypatch.setenv(key.upper(), value)
    with pytest.raises(SettingsError) as refused:
        load_settings()
    message = str(refused.value)
    assert message.startswith(f"{name}: ") and "\n" not in message


def test_the_data_directory_must_not_be_a_file(monkeypatch, tmp_path):
    (tmp_path / "data").write_text("x")
    monkeypatch.setenv("CS_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(SettingsError, match=r"^CS_DATA_DIR: .* is not a directory$"):
        load_settings()
    monkeypatch.setenv("CS_DATA_DIR", str(tmp_path / "data" / "below"))
    with pytest.raises(SettingsError, match=r"^CS_DATA_DIR: cannot be made: .* is not a directory$"):
        load_settings()


def test_good_values_pass_and_an_empty_one_is_unset(monkeypatch, tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    good = {"DATABASE_URL": PG, "REDIS_URL": "rediss://:pw@cache.internal:6380/2", "CS_SECRET_KEY": "s3cret",
            "SMTP_URL": "smtp://user:p%40ss@mail.example.com:587?starttls=1", "SMTP_CA_FILE": str(ca),
            "MAIL_FROM": "Crew Success <success@crew.example>", "CS_PUBLIC_URL": "https://cs.example.com/",
            "OPENAI_BASE_URL": "http://127.0.0.1:11434/v1", "STRIPE_SECRET_KEY": "rk_live_abc",
            "STRIPE_API_BASE": "http://127.0.0.1:12111", "STRIPE_WEBHOOK_SECRET": "whsec_abc",
            "CS_LOG_LEVEL": "debug", "ALLOW_PRIVATE_WEBHOOK_URLS": "", "OPENAI_API_KEY": "",
            "CS_DATA_DIR": str(tmp_path / "not" / "yet")}
    for key, value in good.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    assert settings.production and settings.database_url == "postgresql+psycopg://cs@db.internal:5432/cs"
    assert settings.cs_public_url == "https://cs.example.com" and settings.cs_log_level == "DEBUG"
    assert settings.allow_private_webhook_urls is None and settings.openai_api_key is None
    assert not (tmp_path / "not").exists()   # checking makes nothing


def test_the_defaults_pass(monkeypatch):
    settings = load_settings()
    assert not settings.production and settings.mail_from == "Customer Success <cs@localhost>"


def test_the_api_processes_run_cs_api_threads_threads(tmp_path):
    """CS_API_THREADS sets gunicorn's --threads of `cs serve`'s API processes (12 by default)."""
    from cs_cli.supervisor import gunicorn_argv
    from cs_daemon.config import Settings

    def threads(settings):
        argv = gunicorn_argv(settings, "127.0.0.1", 8000)
        return argv[argv.index("--threads") + 1]

    assert threads(Settings(cs_data_dir=str(tmp_path))) == "12"
    assert threads(Settings(cs_data_dir=str(tmp_path), cs_api_threads=4)) == "4"
