"""The service core: storage, business rules and jobs. Knows nothing of Flask or Typer."""

__version__ = "0.1.0"
