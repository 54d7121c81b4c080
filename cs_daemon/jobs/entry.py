"""Module the `dramatiq` command loads in each worker process (production mode):
it installs the broker from the settings and imports every actor module."""

from cs_daemon.logs import setup_logging
from cs_daemon.config import load_settings

from cs_daemon.runtime import Runtime

settings = load_settings()
setup_logging(settings.cs_log_level)
broker = Runtime(settings).install_broker()
