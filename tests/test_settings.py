"""The documented configuration matches what the settings read."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_env_example_lists_every_setting_read():
    read = set(re.findall(r'env(?:\.\w+)?\("([A-Z_]+)"', (ROOT / "kookee/settings.py").read_text()))
    # Tracing is configured by OpenTelemetry's own variables, read in chat/tracing.py.
    read |= set(re.findall(r'"(OTEL_[A-Z_]+)"', (ROOT / "chat/tracing.py").read_text()))
    listed = set(re.findall(r"^#? ?([A-Z_]+)=", (ROOT / ".env.example").read_text(), re.MULTILINE))
    assert read == listed
