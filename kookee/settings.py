"""Settings: everything comes from the environment (or a .env file beside
manage.py), with defaults that need nothing running: SQLite, the in-memory
channel layer and the built-in offline model."""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if (BASE_DIR / ".env").exists():
    environ.Env.read_env(BASE_DIR / ".env")

DEBUG = env.bool("DJANGO_DEBUG", default=True)
SECRET_KEY = env("DJANGO_SECRET_KEY", default="dev-only-insecure-key-change-me")
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1"])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "chat",
    "billing",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files from the app itself, under any ASGI server.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "kookee.urls"
ASGI_APPLICATION = "kookee.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Turns write from worker threads while the page reads: wait for the lock
    # instead of failing with "database is locked".
    DATABASES["default"].setdefault("OPTIONS", {})["timeout"] = 20
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env("REDIS_URL", default="")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"

# The model provider. With neither a key nor a base URL, the built-in offline
# model answers (chat/offline.py), so the app works with no network.
OPENAI_API_KEY = env("OPENAI_API_KEY", default="")
OPENAI_BASE_URL = env("OPENAI_BASE_URL", default="")
OPENAI_MODEL = env("OPENAI_MODEL", default="gpt-4o-mini")
KOOKEE_OFFLINE_MODEL = "kookee-offline"
# Seconds to wait for the provider to connect / between two chunks.
KOOKEE_PROVIDER_TIMEOUT = env.float("KOOKEE_PROVIDER_TIMEOUT", default=60.0)
# Model calls per turn; the last allowed round must answer without tools.
KOOKEE_MAX_ROUNDS = env.int("KOOKEE_MAX_ROUNDS", default=5)
KOOKEE_MAX_OUTPUT_TOKENS = env.int("KOOKEE_MAX_OUTPUT_TOKENS", default=1024)
KOOKEE_MAX_MESSAGE_CHARS = env.int("KOOKEE_MAX_MESSAGE_CHARS", default=4000)
# Earlier turns sent to the model as context.
KOOKEE_HISTORY_TURNS = env.int("KOOKEE_HISTORY_TURNS", default=10)
# Pace of the offline model: tokens per second and delay before the first one.
KOOKEE_OFFLINE_TOKENS_PER_SECOND = env.float("KOOKEE_OFFLINE_TOKENS_PER_SECOND", default=40.0)
KOOKEE_OFFLINE_FIRST_TOKEN_MS = env.int("KOOKEE_OFFLINE_FIRST_TOKEN_MS", default=300)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {"kookee": {"handlers": ["console"], "level": "INFO", "propagate": False}},
}
