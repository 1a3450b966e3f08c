from django.db import models
from django.urls import reverse
from django.utils.translation import gettext_lazy as _


class Article(models.Model):
    title = models.CharField(_("title"), max_length=200)
    slug = models.SlugField(_("slug"), max_length=200, unique=True)
    body = models.TextField(_("body"), help_text=_("Markdown."))
    published = models.BooleanField(_("published"), default=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        # Moved from chat (migration chat 0012): the table, rows and ids are kept.
        db_table = "chat_helparticle"
        ordering = ["title"]
        verbose_name = _("help article")
        verbose_name_plural = _("help articles")

    def __str__(self) -> str:
        return self.title

    def get_absolute_url(self) -> str:
        return reverse("help-article", args=[self.slug])


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
