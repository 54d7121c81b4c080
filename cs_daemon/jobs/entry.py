"""Module the `dramatiq` command loads in each worker process (production mode):
it builds the runtime through the composition root (cs_daemon/wiring.py) and installs
the broker from the settings. A bad setting ends the process with exit code 2, which
stops dramatiq (and `cs serve`, `cs worker`)."""

from cs_daemon.config import load_settings_or_exit
from cs_daemon.logs import adopt_handlers

from cs_daemon.wiring import bootstrap

settings = load_settings_or_exit()
adopt_handlers(settings.cs_log_level, settings.cs_log_format)   # dramatiq's CLI has set up the handlers
broker = bootstrap(settings).install_broker()
