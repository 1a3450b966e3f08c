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
