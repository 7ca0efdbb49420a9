"""Suite-wide settings: under CI, hypothesis draws the same examples every run (reproducible
verdicts); locally it explores new ones each time."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
