from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse
from django.utils.translation import gettext_lazy as _


def default_locale() -> str:
    return settings.LANGUAGE_CODE


class Source(models.Model):
    """Where imported articles come from (helpcenter/importers/): a kind, a
    location, and how to read it. Syncing a source again updates its
    articles; articles typed in the admin have no source and no sync ever
    touches them."""

    class Kind(models.TextChoices):
        MARKDOWN = "markdown", _("Folder of Markdown files")
        ZENDESK = "zendesk", _("Zendesk Help Center")
        INTERCOM = "intercom", _("Intercom Articles")
        WEBSITE = "website", _("Website")

    kind = models.CharField(_("kind"), max_length=20, choices=Kind.choices)
    name = models.CharField(_("name"), max_length=200)
    location = models.CharField(
        _("location"), max_length=1000, help_text=_("A URL, or a folder or file on the server.")
    )
    settings = models.JSONField(
        _("settings"),
        default=dict,
        blank=True,
        help_text=_(
            'For example {"locales": ["en-us", "pt-br"]}, {"max_pages": 200}, {"sections": [123]}: '
            "see docs/operations.md."
        ),
    )
    token_env = models.CharField(
        _("token from the environment variable"),
        max_length=100,
        blank=True,
        help_text=_("The name of an environment variable that holds the token (its value is never stored)."),
    )
    # Fernet, keyed from SECRET_KEY (helpcenter/importers/secrets.py): never shown, never logged.
    token_encrypted = models.TextField(_("token (encrypted)"), blank=True, editable=False)
    # What the source said last time (a website's ETag and Last-Modified per page).
    state = models.JSONField(default=dict, blank=True, editable=False)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    synced_at = models.DateTimeField(_("last sync"), null=True, blank=True, editable=False)
    # The lease that keeps two syncs of one source apart (helpcenter/importers/sync.py).
    running_since = models.DateTimeField(_("running since"), null=True, blank=True, editable=False)
    run_id = models.CharField(max_length=32, blank=True, editable=False)
    progress_done = models.PositiveIntegerField(_("done"), default=0, editable=False)
    progress_total = models.PositiveIntegerField(_("expected"), null=True, blank=True, editable=False)
    # What the counts are of: pages read, or (after them) sections embedded.
    progress_embedding = models.BooleanField(default=False, editable=False)
    last_result = models.JSONField(_("last result"), default=dict, blank=True, editable=False)
    last_error = models.TextField(_("last error"), blank=True, editable=False)

    class Meta:
        constraints = [models.UniqueConstraint("kind", "location", name="one_source_per_kind_and_location")]
        ordering = ["name"]
        verbose_name = _("source")
        verbose_name_plural = _("sources")

    def __str__(self) -> str:
        return self.name


class Article(models.Model):
    title = models.CharField(_("title"), max_length=200)
    slug = models.SlugField(_("slug"), max_length=200, unique=True)
    body = models.TextField(_("body"), help_text=_("Markdown."))
    published = models.BooleanField(_("published"), default=True)
    locale = models.CharField(
        _("language"), max_length=20, default=default_locale, help_text=_("For example en, pt-br.")
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    # Imported articles only (helpcenter/importers/): where each came from.
    # PROTECT: a source's articles outlive nothing by accident (old
    # transcripts link them).
    source = models.ForeignKey(
        Source, models.PROTECT, null=True, blank=True, related_name="articles", verbose_name=_("source")
    )
    external_id = models.CharField(_("id at the source"), max_length=500, blank=True)
    # The versions of one article in several languages share it (within a source).
    translation_key = models.CharField(_("translation of"), max_length=500, blank=True)
    source_url = models.URLField(_("at the source"), max_length=1000, blank=True)
    section = models.CharField(_("section at the source"), max_length=200, blank=True)
    source_updated_at = models.DateTimeField(_("updated at the source"), null=True, blank=True)
    # The source's content as last imported: a sync rewrites the article only when it changes.
    digest = models.CharField(max_length=64, blank=True, editable=False)
    synced_at = models.DateTimeField(_("last sync"), null=True, blank=True)

    class Meta:
        # Moved from chat (migration chat 0012): the table, rows and ids are kept.
        db_table = "chat_helparticle"
        ordering = ["title"]
        constraints = [
            models.UniqueConstraint(
                "source",
                "external_id",
                "locale",
                condition=Q(source__isnull=False),
                name="one_article_per_source_id_and_locale",
            )
        ]
        verbose_name = _("help article")
        verbose_name_plural = _("help articles")

    def __str__(self) -> str:
        return self.title

    def get_absolute_url(self) -> str:
        return reverse("help-article", args=[self.slug])

    @property
    def language(self) -> str:
        """The locale's language (pt for pt-br): what a visitor's is matched against."""
        return language_of(self.locale)


class PassageVector(models.Model):
    """A passage's embedding under one model, named by the digest of the text
    the model read (helpcenter/passages.py): an edit re-embeds only the
    sections it changed, and a change of model finds no vectors for the new
    one, so everything is embedded again (helpcenter/indexer.py)."""

    model = models.CharField(_("model"), max_length=200)
    digest = models.CharField(_("digest"), max_length=64)
    dimensions = models.PositiveIntegerField(_("dimensions"))
    vector = models.BinaryField(_("vector"))  # float32, little-endian, normalised
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint("model", "digest", name="one_vector_per_model_and_passage")]
        verbose_name = _("passage vector")
        verbose_name_plural = _("passage vectors")

    def __str__(self) -> str:
        return f"{self.model} {self.digest[:12]}"


class PassageClaim(models.Model):
    """A worker's lease on embedding one passage under one model
    (helpcenter/indexer.py): whoever inserts the row embeds the passage, so
    that each is embedded (and billed) once across every process. The worker
    renews it while it embeds and deletes it with the vector's write; a row
    whose lease ran out is a worker that died, and is taken again."""

    model = models.CharField(max_length=200)
    digest = models.CharField(max_length=64)
    holder = models.CharField(max_length=200)  # host:pid:run, for the logs
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint("model", "digest", name="one_claim_per_model_and_passage")]

    def __str__(self) -> str:
        return f"{self.model} {self.digest[:12]} by {self.holder}"


def language_of(locale: str) -> str:
    return locale.replace("_", "-").split("-")[0].lower()
