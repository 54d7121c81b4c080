"""Python client for the customer-success service's event API (docs/sdk.md).

    from cs_sdk import Client

    client = Client("rt_live_…", "https://cs.example.com")
    client.identify("user-42", {"email": "ada@example.com", "name": "Ada"})
    client.track("user-42", "report_created", {"rows": 120})
"""

__version__ = "0.1.0"

from .client import Client  # noqa: E402
from .clock import ManualClock, SystemClock  # noqa: E402
from .errors import ClientClosed, Dropped, NotIdentified  # noqa: E402
from .sender import Stats  # noqa: E402

__all__ = ["Client", "ClientClosed", "Dropped", "ManualClock", "NotIdentified", "Stats", "SystemClock",
           "__version__"]
