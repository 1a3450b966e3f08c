"""The test run's settings: the project's, with what a developer's machine
would give `make run` (DEBUG on, a secret). Set in the environment, so the
servers that tests start in their own processes share them (and with the
secret, the hashes of visitor keys)."""

import os

os.environ.setdefault("DJANGO_DEBUG", "true")
# A loaded machine's pauses must not refuse a test's sockets as saturated
# (tests/chat/engine/test_capacity.py turns it on).
os.environ.setdefault("KOOKEE_SATURATION_MS", "0")
os.environ.setdefault("DJANGO_SECRET_KEY", "kookee-tests-only-" + "0123456789abcdef" * 4)

from kookee.settings import *  # noqa: F403

# Logging in test users: a fast hash, not a deliberately slow one.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Search by words unless a test asks for meaning too: a test's help center
# is embedded by the tests that need it (tests/helpcenter/), not behind
# every test that saves an article.
KOOKEE_EMBEDDINGS = os.environ.get("KOOKEE_EMBEDDINGS", "off")
KOOKEE_EMBEDDINGS_MODEL = os.environ.get("KOOKEE_EMBEDDINGS_MODEL", "multilingual-e5-small-q4")
