"""Settings: everything comes from the environment (or a .env file beside
manage.py), with defaults that need nothing running: SQLite, the in-memory
channel layer and the built-in offline model."""

import ipaddress
import os
import re
from pathlib import Path
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import environ  # type: ignore[import-untyped]  # django-environ ships no type hints, nor do stubs exist
from django.core.exceptions import ImproperlyConfigured

from kookee.secret_key import check_secret_key, local_secret_key

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if (BASE_DIR / ".env").exists():
    environ.Env.read_env(BASE_DIR / ".env")

# Fail closed: DEBUG (tracebacks with visitors' text in them) only when asked
# for, and never a guessable secret outside it. `make run` asks for DEBUG.
DEBUG = env.bool("DJANGO_DEBUG", default=False)
SECRET_KEY = env("DJANGO_SECRET_KEY", default="")
if not SECRET_KEY and DEBUG:
    SECRET_KEY = local_secret_key(BASE_DIR / ".secret_key")
check_secret_key(SECRET_KEY, debug=DEBUG)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1"])
if DEBUG and "*" in ALLOWED_HOSTS:
    raise ImproperlyConfigured(
        "DJANGO_ALLOWED_HOSTS=* with DJANGO_DEBUG on would show tracebacks to anyone: "
        "list your hosts, or turn DEBUG off."
    )

if not DEBUG:
    # Production is served over HTTPS, usually behind a proxy that says so.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
    SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=60 * 60 * 24 * 365)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
    SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    # Cookies only this exact origin can set, over HTTPS: a sibling
    # subdomain or a plain-HTTP answer cannot plant a session key of its
    # choosing in the visitor's browser (session fixation).
    SESSION_COOKIE_NAME = "__Host-sessionid"
    CSRF_COOKIE_NAME = "__Host-csrftoken"

INSTALLED_APPS = [
    "daphne",
    "kookee.apps.AdminConfig",  # django.contrib.admin
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "chat",
    "billing",
    "helpcenter",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files from the app itself, under any ASGI server.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The visitor's language, from their browser's Accept-Language.
    "django.middleware.locale.LocaleMiddleware",
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
# Async code reaches the database through one worker thread; opening and
# closing a connection for each of its calls cost more than the queries.
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DJANGO_CONN_MAX_AGE", default=600)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Under ASGI each request's sync code runs in a thread of its own, and a
    # persistent connection stays with its thread: 300 page loads at once
    # opened 300 connections ("too many clients", HTTP 500). A pool bounds
    # them and lends one per unit of work instead.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 2,
        "max_size": env.int("KOOKEE_DB_POOL_SIZE", default=10),
        "timeout": 20,
    }
# A process whose event loop or turns' database work runs this late refuses
# new sockets (close code 4503: chat/engine/capacity.py); 0: never. Two
# seconds: a safety valve for a process far past capacity, where handshakes
# would time out. At 500 ms, 200 back-to-back visitors were refused 400
# times in 20 s, and the retries' reconnections made the others slower.
KOOKEE_SATURATION_MS = env.int("KOOKEE_SATURATION_MS", default=2000)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Turns write from worker threads while pages read: wait for the lock
    # rather than fail, take it up front (no upgrade deadlocks), and let
    # readers and the writer run side by side (WAL).
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Database sessions, but a page view writes no row (chat/visitors/sessions.py).
SESSION_ENGINE = "chat.visitors.sessions"

REDIS_URL = env("REDIS_URL", default="")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # redis-py's default read timeout (5 s) is the layer's blocking
            # pop (5 s): an idle socket's receive loop timed out and the
            # socket died with 1011. Reads must outlast the pop.
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
                # Each process listens on one channel (chat/engine/hub/); its
                # messages share one queue, dropped past capacity.
                "capacity": 2000,
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# English, and Brazilian Portuguese, chosen from each browser's
# Accept-Language (pages and the chat's socket alike); staff's emails and the
# admin without a preference are in LANGUAGE_CODE. Translations: locale/.
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("pt-br", "Português (Brasil)")]
LOCALE_PATHS = [BASE_DIR / "locale"]
# Dates and times with their seconds, in each language's order.
FORMAT_MODULE_PATH = ["kookee.formats"]
# The site's calendar: budgets' days, finance's daily and monthly figures
# (billing/days.py). An IANA name, e.g. America/Sao_Paulo.
TIME_ZONE = env("DJANGO_TIME_ZONE", default="UTC")
try:
    ZoneInfo(TIME_ZONE)
except (ValueError, ZoneInfoNotFoundError):
    raise ImproperlyConfigured(
        f"DJANGO_TIME_ZONE={TIME_ZONE!r} is not an IANA time zone name, e.g. America/Sao_Paulo."
    ) from None
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"

# The model provider. With neither a key nor a base URL, the built-in offline
# model answers (chat/engine/offline.py), so the app works with no network.
OPENAI_API_KEY = env("OPENAI_API_KEY", default="")
OPENAI_BASE_URL = env("OPENAI_BASE_URL", default="")
OPENAI_MODEL = env("OPENAI_MODEL", default="gpt-4o-mini")
KOOKEE_OFFLINE_MODEL = "kookee-offline"
# Provider faults. Seconds to connect; from the request to the first chunk;
# between two chunks. Requests refused before their stream starts (429, 5xx,
# connection failures) are retried this many times, backing off from
# KOOKEE_PROVIDER_BACKOFF_SECONDS (doubling, or as Retry-After says).
KOOKEE_PROVIDER_CONNECT_TIMEOUT = env.float("KOOKEE_PROVIDER_CONNECT_TIMEOUT", default=10.0)
KOOKEE_PROVIDER_FIRST_TOKEN_TIMEOUT = env.float("KOOKEE_PROVIDER_FIRST_TOKEN_TIMEOUT", default=60.0)
KOOKEE_PROVIDER_STALL_TIMEOUT = env.float("KOOKEE_PROVIDER_STALL_TIMEOUT", default=30.0)
KOOKEE_PROVIDER_RETRIES = env.int("KOOKEE_PROVIDER_RETRIES", default=2)
KOOKEE_PROVIDER_BACKOFF_SECONDS = env.float("KOOKEE_PROVIDER_BACKOFF_SECONDS", default=0.5)
# Text the model streams within this many ms of the last delta goes to the
# visitor as one delta frame (chat/engine/coalescer.py); the first never waits. 0: a frame per read.
KOOKEE_DELTA_WINDOW_MS = env.int("KOOKEE_DELTA_WINDOW_MS", default=50)
# Model calls per turn; the last allowed round must answer without tools.
KOOKEE_MAX_ROUNDS = env.int("KOOKEE_MAX_ROUNDS", default=5)
KOOKEE_MAX_OUTPUT_TOKENS = env.int("KOOKEE_MAX_OUTPUT_TOKENS", default=1024)
# How the limit is sent: "max_tokens", "max_completion_tokens", or "auto"
# (max_tokens with OPENAI_BASE_URL, for compatible servers; else the newer name).
KOOKEE_MAX_TOKENS_PARAMETER = env.str("KOOKEE_MAX_TOKENS_PARAMETER", default="auto")
KOOKEE_MAX_MESSAGE_CHARS = env.int("KOOKEE_MAX_MESSAGE_CHARS", default=4000)
# Crash safety: a running turn saves its text and a usage estimate this
# often; a turn whose last save is older than KOOKEE_STALE_TURN_SECONDS was
# left by a dead process, and is closed and billed by the sweep that runs
# every KOOKEE_SWEEP_SECONDS in each server process.
KOOKEE_CHECKPOINT_SECONDS = env.float("KOOKEE_CHECKPOINT_SECONDS", default=1.0)
KOOKEE_STALE_TURN_SECONDS = env.float("KOOKEE_STALE_TURN_SECONDS", default=30.0)
KOOKEE_SWEEP_SECONDS = env.float("KOOKEE_SWEEP_SECONDS", default=30.0)
# When the last tab of a conversation leaves, its running turn goes on this
# long, so that a reload picks it up live; then it is stopped like a Stop.
# 0 stops it at once.
KOOKEE_RESUME_GRACE_SECONDS = env.float("KOOKEE_RESUME_GRACE_SECONDS", default=5.0)
# Limits. Frames per connection (a burst, then a steady rate; past it the
# socket is closed); turns per minute per visitor session and per client
# address; tokens per conversation and, for the whole site, per day.
KOOKEE_FRAME_BURST = env.int("KOOKEE_FRAME_BURST", default=30)
KOOKEE_FRAMES_PER_SECOND = env.float("KOOKEE_FRAMES_PER_SECOND", default=5.0)
# ... and in bytes: what a socket's frames carry, and what they make us send
# back (a history page); a burst, then a steady rate. Past it, as past the
# frame budget.
KOOKEE_FRAME_BYTES_BURST = env.int("KOOKEE_FRAME_BYTES_BURST", default=512 * 1024)
KOOKEE_FRAME_BYTES_PER_SECOND = env.float("KOOKEE_FRAME_BYTES_PER_SECOND", default=32 * 1024)
# What may wait to be sent to one socket (queued, and held by the server)
# before it is closed with 4413: a client that does not read must not grow
# the process (chat/engine/backpressure.py). Above a history page.
KOOKEE_SOCKET_BACKLOG_BYTES = env.int("KOOKEE_SOCKET_BACKLOG_BYTES", default=256 * 1024)
KOOKEE_TURNS_PER_MINUTE = env.int("KOOKEE_TURNS_PER_MINUTE", default=10)
KOOKEE_TURNS_PER_MINUTE_PER_ADDRESS = env.int("KOOKEE_TURNS_PER_MINUTE_PER_ADDRESS", default=60)
KOOKEE_TOKENS_PER_CONVERSATION = env.int("KOOKEE_TOKENS_PER_CONVERSATION", default=500_000)
KOOKEE_TOKENS_PER_DAY = env.int("KOOKEE_TOKENS_PER_DAY", default=20_000_000)
# Daily token budgets that a new cookie or widget token does not reset: per
# visitor, and per network (an IPv4 address or an IPv6 /64), which may take
# at most this share of the site's day, so the site budget is the last line.
KOOKEE_TOKENS_PER_VISITOR_PER_DAY = env.int("KOOKEE_TOKENS_PER_VISITOR_PER_DAY", default=200_000)
KOOKEE_NETWORK_SHARE_OF_DAY: float = env.float("KOOKEE_NETWORK_SHARE_OF_DAY", default=0.05)
if not 0 < KOOKEE_NETWORK_SHARE_OF_DAY <= 1:
    raise ImproperlyConfigured("KOOKEE_NETWORK_SHARE_OF_DAY must be above 0 and at most 1.")
# IPv6 in layers, "prefix length:share of the site's day": one customer holds
# a /64 per line, a /56 or a /48 per site, and each of its /64s would have a
# fresh budget. The longest prefix is also the "network" of rates and sockets.
# Default: an IPv4 address's share per /64, twice it per /56, four times per /48.
_share = KOOKEE_NETWORK_SHARE_OF_DAY
_default_layers = f"64:{_share:g},56:{min(1, 2 * _share):g},48:{min(1, 4 * _share):g}"
_given_layers: str = env("KOOKEE_IPV6_BUDGETS", default=_default_layers)
_layers: dict[int, float]
try:
    _layers = {int(p): float(s) for p, s in (layer.split(":") for layer in _given_layers.split(",") if layer)}
except ValueError:
    _layers = {}
if not _layers or not all(1 <= p <= 128 and 0 < s <= 1 for p, s in _layers.items()):
    raise ImproperlyConfigured(
        f"KOOKEE_IPV6_BUDGETS={_given_layers!r}: give prefix lengths (1-128) and shares (above 0, at most 1), "
        "e.g. 64:0.05,56:0.1,48:0.2"
    )
KOOKEE_IPV6_BUDGETS = dict(sorted(_layers.items(), reverse=True))
# Proxies (addresses or networks) whose X-Forwarded-For is believed, read
# from the right. Empty: the peer's address is the client's. Don't also run
# daphne with --proxy-headers: it believes the leftmost, forgeable, entry.
try:
    KOOKEE_TRUSTED_PROXIES = [
        ipaddress.ip_network(proxy, strict=False) for proxy in env.list("KOOKEE_TRUSTED_PROXIES", default=[])
    ]
except ValueError as e:
    raise ImproperlyConfigured(f"KOOKEE_TRUSTED_PROXIES: {e}") from e
# Open sockets per visitor and per network, in each server process; a socket
# with no frame and no running turn for this long is closed (code 4408), and
# the page reconnects on the visitor's next activity.
KOOKEE_SOCKETS_PER_VISITOR = env.int("KOOKEE_SOCKETS_PER_VISITOR", default=5)
KOOKEE_SOCKETS_PER_NETWORK = env.int("KOOKEE_SOCKETS_PER_NETWORK", default=100)
KOOKEE_IDLE_SOCKET_SECONDS = env.float("KOOKEE_IDLE_SOCKET_SECONDS", default=600.0)
# Turns per `history` frame (the latest first, older ones on request).
KOOKEE_HISTORY_PAGE_TURNS = env.int("KOOKEE_HISTORY_PAGE_TURNS", default=20)
# ... and at most this many bytes of them (one turn at least, however long).
KOOKEE_HISTORY_PAGE_BYTES = env.int("KOOKEE_HISTORY_PAGE_BYTES", default=64 * 1024)
if KOOKEE_HISTORY_PAGE_BYTES >= KOOKEE_SOCKET_BACKLOG_BYTES:
    raise ImproperlyConfigured("KOOKEE_HISTORY_PAGE_BYTES must be below KOOKEE_SOCKET_BACKLOG_BYTES.")
# A widget token unused for this long is refused; the widget starts afresh.
KOOKEE_WIDGET_IDLE_DAYS = env.float("KOOKEE_WIDGET_IDLE_DAYS", default=30.0)
# Personal data: client addresses are dropped from turns after this many
# days (`manage.py purge_expired`, which also clears expired sessions).
KOOKEE_ADDRESS_RETENTION_DAYS = env.int("KOOKEE_ADDRESS_RETENTION_DAYS", default=30)
# Sites that may embed the chat widget (static/chat/widget.js), as origins:
# "https://www.example.com". The chat's own origin always may.
KOOKEE_EMBED_ORIGINS = [o.strip() for o in env.list("KOOKEE_EMBED_ORIGINS", default=[]) if o.strip()]
for _origin in KOOKEE_EMBED_ORIGINS:
    # They go into a Content-Security-Policy header: origins only, nothing
    # that could end the directive or widen it.
    if not re.fullmatch(r"https?://(\*\.)?[A-Za-z0-9.-]+(:\d{1,5})?", _origin):
        raise ImproperlyConfigured(f"KOOKEE_EMBED_ORIGINS: {_origin!r} is not an origin like https://www.example.com")
# The operator's endpoints (chat/ops/monitoring.py). /healthz gives its checks
# (the database, the channel layer) this long in all. /metrics is closed
# (404) unless a bearer token or client networks (matched against the
# socket's peer, never X-Forwarded-For) are set; with both, both must match.
KOOKEE_HEALTH_TIMEOUT_SECONDS = env.float("KOOKEE_HEALTH_TIMEOUT_SECONDS", default=2.0)
KOOKEE_METRICS_TOKEN = env("KOOKEE_METRICS_TOKEN", default="")
if KOOKEE_METRICS_TOKEN and len(KOOKEE_METRICS_TOKEN) < 32:
    raise ImproperlyConfigured(
        "KOOKEE_METRICS_TOKEN is too short: use at least 32 random characters, "
        "e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'"
    )
try:
    KOOKEE_METRICS_ALLOW = [
        ipaddress.ip_network(network.strip(), strict=False)
        for network in env.list("KOOKEE_METRICS_ALLOW", default=[])
        if network.strip()
    ]
except ValueError as e:
    raise ImproperlyConfigured(f"KOOKEE_METRICS_ALLOW: {e}") from e
# The load balancer and Prometheus reach each process directly, over plain
# HTTP: no redirect to HTTPS for them.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
# Earlier turns sent to the model as context.
KOOKEE_HISTORY_TURNS = env.int("KOOKEE_HISTORY_TURNS", default=10)
# How often a process checks whether another one changed the help center
# (its own changes show at once); see helpcenter/index.py.
KOOKEE_HELP_CENTER_RECHECK_SECONDS: float = env.float("KOOKEE_HELP_CENTER_RECHECK_SECONDS", default=5.0)
# Search by meaning as well as by words (helpcenter/embeddings.py): `local`
# (a model installed with the package, no network), `provider` (an
# OpenAI-compatible /v1/embeddings, by default the chat provider's URL and
# key) or `off`. A query waits at most KOOKEE_EMBEDDINGS_TIMEOUT seconds,
# then the search goes on with words alone.
KOOKEE_EMBEDDINGS = env.str("KOOKEE_EMBEDDINGS", default="local")
if KOOKEE_EMBEDDINGS not in ("local", "provider", "off"):
    raise ImproperlyConfigured("KOOKEE_EMBEDDINGS must be local, provider or off.")
_embeddings_model = "text-embedding-3-small" if KOOKEE_EMBEDDINGS == "provider" else "multilingual-e5-small-q4"
KOOKEE_EMBEDDINGS_MODEL = env.str("KOOKEE_EMBEDDINGS_MODEL", default=_embeddings_model)
KOOKEE_EMBEDDINGS_BASE_URL = env.str("KOOKEE_EMBEDDINGS_BASE_URL", default=OPENAI_BASE_URL)
KOOKEE_EMBEDDINGS_API_KEY = env.str("KOOKEE_EMBEDDINGS_API_KEY", default=OPENAI_API_KEY)
if KOOKEE_EMBEDDINGS == "provider" and not (KOOKEE_EMBEDDINGS_BASE_URL or KOOKEE_EMBEDDINGS_API_KEY):
    raise ImproperlyConfigured(
        "KOOKEE_EMBEDDINGS=provider needs an endpoint: KOOKEE_EMBEDDINGS_BASE_URL (or OPENAI_BASE_URL), "
        "or an OpenAI key in KOOKEE_EMBEDDINGS_API_KEY (or OPENAI_API_KEY). The offline chat model embeds nothing."
    )
KOOKEE_EMBEDDINGS_TIMEOUT = env.float("KOOKEE_EMBEDDINGS_TIMEOUT", default=2.0)
KOOKEE_EMBEDDINGS_BATCH = env.int("KOOKEE_EMBEDDINGS_BATCH", default=32)
# Threads the local model computes with (see helpcenter/embeddings.py).
KOOKEE_EMBEDDINGS_THREADS = env.int("KOOKEE_EMBEDDINGS_THREADS", default=1)
# Tokens of a passage the local model reads (its first; at most 512): 256
# embeds a 250-word passage about twice as fast as all of it, and searched
# as well on the evaluation's manuals (helpcenter/local_model.py).
KOOKEE_EMBEDDINGS_PASSAGE_TOKENS = env.int("KOOKEE_EMBEDDINGS_PASSAGE_TOKENS", default=256)
if not 16 <= KOOKEE_EMBEDDINGS_PASSAGE_TOKENS <= 512:
    raise ImproperlyConfigured("KOOKEE_EMBEDDINGS_PASSAGE_TOKENS must be between 16 and 512.")
# Verified visitors (chat/visitors/verified.py): the key the customer's
# backend signs a visitor's identity with (HS256), unset: nobody can be
# verified; and how far ahead a token's expiry may lie.
KOOKEE_IDENTITY_SECRET = env.str("KOOKEE_IDENTITY_SECRET", default="")
if KOOKEE_IDENTITY_SECRET and len(KOOKEE_IDENTITY_SECRET.encode()) < 32:
    # RFC 7518 3.2: an HS256 key shorter than the hash is guessable offline from one token.
    raise ImproperlyConfigured("KOOKEE_IDENTITY_SECRET must be at least 32 bytes (e.g. secrets.token_urlsafe(32)).")
KOOKEE_IDENTITY_MAX_AGE_SECONDS = env.int("KOOKEE_IDENTITY_MAX_AGE_SECONDS", default=86_400)
# The `aud` every identity token must carry (unset: none may carry one), so
# that a token your backend signed for another service is no good here.
KOOKEE_IDENTITY_AUDIENCE = env.str("KOOKEE_IDENTITY_AUDIENCE", default="")
# The team's guidance (chat/assistant/), at most this long: it goes into
# every model call's prompt, and costs its tokens each time.
KOOKEE_GUIDANCE_CHARS = env.int("KOOKEE_GUIDANCE_CHARS", default=4000)
# Actions (chat/actions/): calls of the customer's API. Each has
# KOOKEE_ACTION_TIMEOUT_SECONDS in all; one that would change something
# waits KOOKEE_ACTION_CONFIRM_SECONDS at most for the visitor's yes (then
# it is a no); the model reads at most KOOKEE_ACTION_RESULT_CHARS of an
# answer. An API on a private or loopback address is refused unless
# KOOKEE_ACTIONS_ALLOW_PRIVATE (an API on the customer's own network).
KOOKEE_ACTION_TIMEOUT_SECONDS = env.float("KOOKEE_ACTION_TIMEOUT_SECONDS", default=10.0)
KOOKEE_ACTION_CONFIRM_SECONDS = env.float("KOOKEE_ACTION_CONFIRM_SECONDS", default=120.0)
KOOKEE_ACTION_RESULT_CHARS = env.int("KOOKEE_ACTION_RESULT_CHARS", default=4000)
KOOKEE_ACTIONS_ALLOW_PRIVATE = env.bool("KOOKEE_ACTIONS_ALLOW_PRIVATE", default=False)
if KOOKEE_ACTION_TIMEOUT_SECONDS <= 0 or KOOKEE_ACTION_CONFIRM_SECONDS <= 0 or KOOKEE_ACTION_RESULT_CHARS < 200:
    raise ImproperlyConfigured(
        "KOOKEE_ACTION_TIMEOUT_SECONDS and KOOKEE_ACTION_CONFIRM_SECONDS must be positive, "
        "KOOKEE_ACTION_RESULT_CHARS at least 200."
    )
# A second reading of a search's best candidates by a provider's rerank
# endpoint (helpcenter/rerank.py): POST {KOOKEE_RERANK_BASE_URL}/rerank with
# KOOKEE_RERANK_MODEL, off when the model is unset. It reads the first
# KOOKEE_RERANK_CANDIDATES articles (their best passages); an article whose
# score reaches KOOKEE_RERANK_THRESHOLD is taken to answer ("high"). A
# visitor waits at most KOOKEE_RERANK_TIMEOUT seconds, then the search keeps
# its own order.
KOOKEE_RERANK_MODEL = env.str("KOOKEE_RERANK_MODEL", default="")
KOOKEE_RERANK_BASE_URL = env.str("KOOKEE_RERANK_BASE_URL", default=OPENAI_BASE_URL)
KOOKEE_RERANK_API_KEY = env.str("KOOKEE_RERANK_API_KEY", default=OPENAI_API_KEY)
if KOOKEE_RERANK_MODEL and not KOOKEE_RERANK_BASE_URL:
    raise ImproperlyConfigured(
        "KOOKEE_RERANK_MODEL needs an endpoint: KOOKEE_RERANK_BASE_URL (or OPENAI_BASE_URL), such as "
        "https://api.cohere.com/v2 or http://vllm:8000/v1 (the search posts to its /rerank)."
    )
KOOKEE_RERANK_TIMEOUT = env.float("KOOKEE_RERANK_TIMEOUT", default=2.0)
KOOKEE_RERANK_CANDIDATES = env.int("KOOKEE_RERANK_CANDIDATES", default=15)
if not 3 <= KOOKEE_RERANK_CANDIDATES <= 100:
    raise ImproperlyConfigured("KOOKEE_RERANK_CANDIDATES must be between 3 and 100.")
KOOKEE_RERANK_THRESHOLD = env.float("KOOKEE_RERANK_THRESHOLD", default=0.5)
# Who embeds the passages that have no vector (helpcenter/indexer.py). On:
# a web process that finds some has them embedded, never on its own CPU, by
# a low-priority `run_indexer --once` child. Off: `manage.py run_indexer` does.
KOOKEE_WEB_INDEXER = env.bool("KOOKEE_WEB_INDEXER", default=True)
# Worker processes the commands (import, sync, reindex) embed with; 0: one
# per core with the local model, which computes on one thread per call.
KOOKEE_INDEXER_PROCESSES = env.int("KOOKEE_INDEXER_PROCESSES", default=0)
# A worker's claim on the passages it embeds, renewed while it works: a
# worker that died leaves its passages to the others after this long.
KOOKEE_INDEXER_LEASE_SECONDS = env.float("KOOKEE_INDEXER_LEASE_SECONDS", default=60.0)
# A search ranks the vectors with one matrix-vector product: numpy's BLAS
# threads would only spin against the event loop and the local model's own
# threads (a search took 33 ms at p99 with one BLAS thread, 129 ms with one
# per core, the model on two; bench/search_scale.py). Read when numpy loads,
# which is later.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Importing a help center (helpcenter/importers/; docs/operations.md):
# `manage.py sync_help_center` syncs the sources last synced more than
# KOOKEE_SYNC_HOURS ago. Each fetch is bounded in time (seconds) and size
# (bytes). Importers fetch only a source's own host, and never an address
# of this machine or its private networks, unless
# KOOKEE_IMPORT_ALLOW_PRIVATE (an intranet wiki; the tests' local servers).
KOOKEE_SYNC_HOURS = env.float("KOOKEE_SYNC_HOURS", default=24.0)
KOOKEE_IMPORT_TIMEOUT = env.float("KOOKEE_IMPORT_TIMEOUT", default=20.0)
KOOKEE_IMPORT_MAX_BYTES = env.int("KOOKEE_IMPORT_MAX_BYTES", default=5_000_000)
# A whole sync, every fetch and wait of it, in seconds: past it the sync stops
# and unpublishes nothing. An hour: a 5,000-page website read 2 at a time at
# a second a page takes about 40 minutes; 5,000 Zendesk articles about one.
KOOKEE_IMPORT_DEADLINE_SECONDS = env.float("KOOKEE_IMPORT_DEADLINE_SECONDS", default=3600.0)
KOOKEE_IMPORT_ALLOW_PRIVATE = env.bool("KOOKEE_IMPORT_ALLOW_PRIVATE", default=False)
# A file or folder a source named in the admin reads (Markdown, saved JSON)
# must lie under this folder; unset, the admin accepts none. The
# import_help_center command, run from a shell, reads any.
KOOKEE_IMPORT_ROOT = env("KOOKEE_IMPORT_ROOT", default="")
# "Sync now" in the admin syncs in a child process under this budget
# (helpcenter/importers/budget.py): resident memory in MB, CPU seconds, and
# wall-clock seconds (past KOOKEE_IMPORT_DEADLINE_SECONDS, which stops a sync
# cleanly first). A first import of 5,000 Zendesk articles in a child took
# 156 MB resident and 20 s of CPU.
KOOKEE_SYNC_MEMORY_MB = env.int("KOOKEE_SYNC_MEMORY_MB", default=512)
KOOKEE_SYNC_CPU_SECONDS = env.int("KOOKEE_SYNC_CPU_SECONDS", default=600)
KOOKEE_SYNC_SECONDS = env.int("KOOKEE_SYNC_SECONDS", default=4200)
# Handoff to a person (chat/support/handoffs.py). Support is emailed at these
# addresses (default: every active member of the Support group with one),
# and the webhook, if set, gets a signed JSON POST, with a timeout per
# attempt and retries backing off from KOOKEE_HANDOFF_WEBHOOK_BACKOFF_SECONDS.
# New requests per network per hour are capped: each one mails Support.
KOOKEE_HANDOFF_EMAILS = [a.strip() for a in env.list("KOOKEE_HANDOFF_EMAILS", default=[]) if a.strip()]
KOOKEE_HANDOFF_WEBHOOK = env("KOOKEE_HANDOFF_WEBHOOK", default="")
if KOOKEE_HANDOFF_WEBHOOK and not re.match(r"https?://[^\s/]+", KOOKEE_HANDOFF_WEBHOOK):
    raise ImproperlyConfigured("KOOKEE_HANDOFF_WEBHOOK must be an http(s) URL.")
KOOKEE_HANDOFF_WEBHOOK_SECRET = env("KOOKEE_HANDOFF_WEBHOOK_SECRET", default="")
# The old signature of the body alone (X-Kookee-Signature), sent beside the
# timestamped one while receivers move over; deprecated, to default to false.
KOOKEE_HANDOFF_WEBHOOK_LEGACY_SIGNATURE = env.bool("KOOKEE_HANDOFF_WEBHOOK_LEGACY_SIGNATURE", default=True)
# A helpdesk's replies (chat/support/api.py) are signed over the time, the
# method, the path and the body. The old signature of the body alone replays
# anywhere, forever: accepted only while this deprecation switch is on, for an
# integration written before the change (docs/operations.md says how to move).
KOOKEE_HANDOFF_REPLY_LEGACY_SIGNATURE = env.bool("KOOKEE_HANDOFF_REPLY_LEGACY_SIGNATURE", default=False)
KOOKEE_HANDOFF_WEBHOOK_TIMEOUT = env.float("KOOKEE_HANDOFF_WEBHOOK_TIMEOUT", default=5.0)
KOOKEE_HANDOFF_WEBHOOK_RETRIES = env.int("KOOKEE_HANDOFF_WEBHOOK_RETRIES", default=3)
KOOKEE_HANDOFF_WEBHOOK_BACKOFF_SECONDS = env.float("KOOKEE_HANDOFF_WEBHOOK_BACKOFF_SECONDS", default=2.0)
KOOKEE_HANDOFFS_PER_HOUR_PER_NETWORK = env.int("KOOKEE_HANDOFFS_PER_HOUR_PER_NETWORK", default=5)
# Support's replies in the chat (chat/support/replies.py): a reply that no
# tab of the visitor showed within KOOKEE_REPLY_EMAIL_AFTER_SECONDS goes to
# the address they left (checked at each sweep), with a link back to the
# conversation that works for KOOKEE_REPLY_LINK_DAYS.
KOOKEE_REPLY_EMAIL_AFTER_SECONDS = env.float("KOOKEE_REPLY_EMAIL_AFTER_SECONDS", default=60.0)
KOOKEE_REPLY_LINK_DAYS = env.int("KOOKEE_REPLY_LINK_DAYS", default=7)
# This site's address, for the links in Support's emails and webhooks
# (https://chat.example.com); unset, they are paths.
KOOKEE_SITE_URL = env("KOOKEE_SITE_URL", default="")
# The admin's forms (and the link back of a reply's email) are posted from
# the site's public origin; behind a proxy that passes `Host: $host` (nginx
# drops a port that is not 443) Django would not recognise it as its own.
if KOOKEE_SITE_URL:
    CSRF_TRUSTED_ORIGINS = ["{0.scheme}://{0.netloc}".format(urlsplit(KOOKEE_SITE_URL))]
# Email (Support's handoff notices): an EMAIL_URL such as
# smtp+tls://user:password@smtp.example.com:587. Under DEBUG the console by
# default; in production none unless set (`check --deploy` warns), since the
# console is the process's log, and logs carry no visitor's words.
EMAIL_URL = env("EMAIL_URL", default="consolemail://" if DEBUG else "")
if EMAIL_URL:
    vars().update(environ.Env.email_url_config(EMAIL_URL))
else:
    EMAIL_BACKEND = "django.core.mail.backends.dummy.EmailBackend"
EMAIL_TIMEOUT = 10  # seconds: a stalled mail server must not hold a thread
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", default="Kookee chat <kookee@localhost>")
SERVER_EMAIL = DEFAULT_FROM_EMAIL
# Pace of the offline model: tokens per second and delay before the first one.
KOOKEE_OFFLINE_TOKENS_PER_SECOND = env.float("KOOKEE_OFFLINE_TOKENS_PER_SECOND", default=40.0)
KOOKEE_OFFLINE_FIRST_TOKEN_MS = env.int("KOOKEE_OFFLINE_FIRST_TOKEN_MS", default=300)

# Every event once: Django's own loggers print through our handler only (its
# default config adds a second one under DEBUG), and a 4xx is a line, not a
# traceback. Kookee's INFO lines carry ids and numbers, never what a visitor
# or the model wrote.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"no_client_error_traceback": {"()": "kookee.log_filters.NoClientErrorTraceback"}},
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["no_client_error_traceback"],
        }
    },
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        "kookee": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "django": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
