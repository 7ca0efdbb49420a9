"""Makes tests/dashboard/dashboard_helpers.py importable (a unique name: other packages have conftests)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
