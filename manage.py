#!/usr/bin/env python
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kookee.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        settings.INSTALLED_APPS  # noqa: B018 (loads the settings)
    except ImproperlyConfigured as refusal:
        # The settings refuse to start (no secret without DEBUG, a bad value):
        # their sentence says why and what to do; a traceback would bury it.
        sys.exit(f"manage.py: {refusal}")
    execute_from_command_line(sys.argv)
