"""The Python SDK (sdk/python) is imported from its folder, not installed: the tests use
the code as it is in the checkout."""

from __future__ import annotations

import sys
from pathlib import Path

SDK = Path(__file__).resolve().parents[2] / "sdk" / "python"
if str(SDK) not in sys.path:
    sys.path.insert(0, str(SDK))
