from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class HelpCenterConfig(AppConfig):
    name = "helpcenter"
    verbose_name = _("Help center")

    def ready(self) -> None:
        # The search index forgets itself when an article changes, and the
        # indexer embeds its new passages (signals).
        from helpcenter import index, indexer  # noqa: F401
