"""WSGI entry for gunicorn: `gunicorn webapp.wsgi:app`."""

from cs_daemon.logs import setup_logging
from cs_daemon.config import load_settings

from . import create_app

settings = load_settings()
setup_logging(settings.cs_log_level)
app = create_app(settings)
app.extensions["cs"].install_broker()
