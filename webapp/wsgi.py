"""WSGI entry for gunicorn: `gunicorn webapp.wsgi:app`. The settings are checked first in
gunicorn's master (webapp/gunicorn_hooks.py), before it opens its port."""

import gc

from cs_daemon import db
from cs_daemon.logs import setup_logging
from cs_daemon.config import load_settings_or_exit

from . import create_app

# 3 is gunicorn's "worker failed to boot": its master then stops instead of restarting us
settings = load_settings_or_exit(code=3)
setup_logging(settings.cs_log_level, settings.cs_log_format)
app = create_app(settings)
app.extensions["cs"].install_broker()
db.get_engine(settings)   # its driver's modules now, not in the first request (no connection is opened)
# What the process has built by now (modules, the app, the models) lives as long as it does:
# out of the cyclic collector's reach, whose full collections would otherwise walk all of it
# again and again under load (100-250 ms each; about a tenth of an API process's CPU a
# request in bench/ingest.py before the freeze; docs/deploy.md)
gc.collect()
gc.freeze()
