from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from base.admin import ModelAdmin
from helpcenter.importers import SourceError, check_settings, location_of, reader_for, secrets
from helpcenter.importers.sync import Busy, sync_in_background
from helpcenter.models import Article, Source
from helpcenter.sync_results import result_text, started, tell_ended


class StateFilter(admin.SimpleListFilter):
    title = _("state")
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [
            ("published", _("Published")),
            ("unpublished", _("Unpublished")),
            ("gone", _("No longer at its source")),
        ]

    def queryset(self, request, queryset):
        if self.value() == "published":
            return queryset.filter(published=True)
        if self.value() == "unpublished":
            return queryset.filter(published=False)
        if self.value() == "gone":
            return queryset.filter(published=False, source__isnull=False, digest="")
        return queryset


def clamped(text: str) -> str:
    """Text that takes two lines at most in a list (static/helpcenter/admin.css), whole in its tooltip."""
    return format_html('<span class="hc-clamp" title="{}">{}</span>', text, text)


@admin.register(Article)
class ArticleAdmin(ModelAdmin):
    list_display = ["short_title", "locale", "source_name", "state", "synced_at", "updated_at"]
    list_filter = [StateFilter, "source", "locale"]
    search_fields = ["title", "body"]
    prepopulated_fields = {"slug": ["title"]}
    list_select_related = ["source"]
    IMPORTED = [
        "source",
        "external_id",
        "at_the_source",
        "section",
        "translations",
        "source_updated_at",
        "synced_at",
    ]

    class Media:
        css = {"all": ["helpcenter/admin.css"]}

    def get_fields(self, request, obj=None):
        fields = ["title", "slug", "body", "published", "locale"]
        return fields + self.IMPORTED if obj is not None and obj.source_id else fields

    def get_readonly_fields(self, request, obj=None):
        if obj is not None and obj.source_id:
            # The source is the article's home: an edit here would be
            # overwritten by the next sync that finds it changed.
            return ["title", "slug", "body", "locale", *self.IMPORTED]
        return []

    def get_prepopulated_fields(self, request, obj=None):
        return {} if obj is not None and obj.source_id else self.prepopulated_fields

    def change_view(self, request, object_id, form_url="", extra_context=None):
        article = self.get_object(request, object_id)
        if article is not None and article.source_id and request.method == "GET":
            messages.info(
                request,
                gettext(
                    "Imported from %(source)s: edit it there, and the next sync brings the change. "
                    "Unpublishing it here lasts until the source changes it."
                )
                % {"source": article.source.name},
            )
        return super().change_view(request, object_id, form_url, extra_context)

    @admin.display(description=_("title"), ordering="title")
    def short_title(self, article):
        return clamped(article.title)

    @admin.display(description=_("source"), ordering="source__name")
    def source_name(self, article):
        return clamped(article.source.name) if article.source_id else gettext("Typed in the admin")

    @admin.display(description=_("state"), ordering="published")
    def state(self, article):
        if article.published:
            return gettext("Published")
        if article.source_id and not article.digest:
            return gettext("No longer at its source")
        return gettext("Unpublished")

    @admin.display(description=_("at the source"))
    def at_the_source(self, article):
        if not article.source_url:
            return None  # the admin's empty value
        return format_html('<a href="{}" rel="noopener noreferrer">{}</a>', article.source_url, article.source_url)

    @admin.display(description=_("in other languages"))
    def translations(self, article):
        if not article.translation_key:
            return None  # the admin's empty value
        others = Article.objects.filter(source_id=article.source_id, translation_key=article.translation_key).exclude(
            pk=article.pk
        )
        links = [(reverse("admin:helpcenter_article_change", args=[a.pk]), a.locale, a.title) for a in others]
        return format_html_join(", ", '<a href="{}">{}: {}</a>', links) or None


class SourceForm(forms.ModelForm):
    token = forms.CharField(
        label=_("token"),
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text=_(
            "Stored encrypted, never shown again. Leave empty to keep the current one. Or name an environment "
            "variable below instead. Zendesk: email/token:API_TOKEN, or an OAuth token; Intercom: an access token."
        ),
    )
    clear_token = forms.BooleanField(label=_("forget the stored token"), required=False)

    class Meta:
        model = Source
        fields = ["name", "kind", "location", "settings", "token", "clear_token", "token_env"]
        help_texts = {
            "location": _("A URL, or a folder or file on the server under KOOKEE_IMPORT_ROOT."),
            "token_env": _(
                "The name of an environment variable that holds the token (its value is never stored): "
                "KOOKEE_SOURCE_TOKEN_ and a name, such as KOOKEE_SOURCE_TOKEN_ZENDESK."
            ),
        }

    def clean_token_env(self):
        name = self.cleaned_data["token_env"]
        if name:
            try:
                secrets.check_env_name(name)
            except secrets.TokenError as e:
                raise forms.ValidationError(str(e)) from None
        return name

    def clean(self):
        cleaned = super().clean()
        kind, location = cleaned.get("kind"), cleaned.get("location")
        if kind and location:
            try:
                reader_for(kind)
                # Here, only under KOOKEE_IMPORT_ROOT: the admin is a web page.
                cleaned["location"] = location_of(kind, location, confined=True)
            except SourceError as e:
                self.add_error("location", str(e))
        if "settings" in cleaned:
            try:
                check_settings(cleaned["settings"])
            except SourceError as e:
                self.add_error("settings", str(e))
        return cleaned

    def save(self, commit=True):
        source = super().save(commit=False)
        if self.cleaned_data.get("clear_token"):
            source.token_encrypted = ""
        elif self.cleaned_data.get("token"):
            source.token_encrypted = secrets.encrypt(self.cleaned_data["token"])
        if commit:
            source.save()
        return source


@admin.register(Source)
class SourceAdmin(ModelAdmin):
    form = SourceForm
    # The status says when it last synced: no column of its own beside it (the list fits a 1,366 px laptop).
    list_display = ["name", "kind", "location", "article_count", "status", "last_result_shown"]
    list_filter = ["kind"]
    actions = ["sync_now"]
    readonly_fields = ["token_stored", "status", "last_result_shown", "articles_link", "synced_at"]
    change_form_template = "admin/helpcenter/source/change_form.html"
    change_list_template = "admin/helpcenter/source/change_list.html"

    class Media:
        css = {"all": ["helpcenter/admin.css"]}

    # The superusers' alone, whatever model permissions a user holds: a
    # source names files on the server to read and where its token is sent.
    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return self.has_module_permission(request)

    def has_add_permission(self, request):
        return self.has_module_permission(request)

    def has_change_permission(self, request, obj=None):
        return self.has_module_permission(request)

    def has_delete_permission(self, request, obj=None):
        return self.has_module_permission(request)

    def get_fieldsets(self, request, obj=None):
        fieldsets = [
            (None, {"fields": ["name", "kind", "location", "settings"]}),
            (_("Access"), {"fields": ["token_stored", "token", "clear_token", "token_env"]}),
        ]
        if obj is not None:
            fieldsets.append(
                (_("Sync"), {"fields": ["status", "synced_at", "last_result_shown", "articles_link"]}),
            )
        return fieldsets

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(article_total=Count("articles"))

    def get_readonly_fields(self, request, obj=None):
        # A source's kind and location are what it is: a new one is another source.
        return [*self.readonly_fields, "kind", "location"] if obj is not None else self.readonly_fields

    def get_urls(self):
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        sync = path("<path:object_id>/sync/", self.admin_site.admin_view(self.sync_view), name=f"{name}_sync")
        return [sync, *super().get_urls()]

    def changelist_view(self, request, extra_context=None):
        # The list refreshes itself while a sync runs: it is where the action shows its progress.
        tell_ended(request)
        syncing = Source.objects.filter(running_since__isnull=False).exists()
        return super().changelist_view(request, {**(extra_context or {}), "syncing": syncing})

    def change_view(self, request, object_id, form_url="", extra_context=None):
        # The source's page refreshes itself too while it syncs; its "Sync now" posts to sync_view.
        tell_ended(request)
        context = {**(extra_context or {}), "sync_url": reverse("admin:helpcenter_source_sync", args=[object_id])}
        return super().change_view(request, object_id, form_url, context)

    def sync_view(self, request, object_id):
        """The source page's "Sync now": as the list's action, for this source."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_change_permission(request):
            raise PermissionDenied
        source = self.get_object(request, unquote(object_id))
        if source is None:
            raise Http404
        self._sync(request, [source])
        return HttpResponseRedirect(reverse("admin:helpcenter_source_change", args=[source.pk]))

    @admin.action(description=_("Sync now"))
    def sync_now(self, request, queryset):
        self._sync(request, list(queryset))

    def _sync(self, request, sources: list[Source]) -> None:
        names = []
        for source in sources:
            try:
                sync_in_background(source)
            except Busy:
                self.message_user(
                    request, gettext("%(name)s is already syncing.") % {"name": source.name}, messages.WARNING
                )
            else:
                started(request, source)  # its result is told on the first page after it ends
                names.append(source.name)
        if names:
            self.message_user(
                request,
                ngettext(
                    "Syncing %(names)s: this page shows how far it is.",
                    "Syncing %(names)s: this page shows how far they are.",
                    len(names),
                )
                % {"names": ", ".join(names)},
                messages.SUCCESS,
            )

    @admin.display(description=_("articles"), ordering="article_total")
    def article_count(self, source):
        return source.article_total

    @admin.display(description=_("articles"))
    def articles_link(self, source):
        url = reverse("admin:helpcenter_article_changelist") + f"?source__id__exact={source.pk}"
        return format_html('<a href="{}">{}</a>', url, gettext("The source's articles"))

    @admin.display(description=_("stored token"))
    def token_stored(self, source):
        return gettext("Set (encrypted)") if source.token_encrypted else gettext("None")

    @admin.display(description=_("status"), ordering="synced_at")
    def status(self, source):
        if source.running_since is not None:
            if source.progress_embedding:
                return format_html(
                    '<span class="kk-running">{}</span>',
                    ngettext(
                        "Embedding: %(done)s of %(total)s section",
                        "Embedding: %(done)s of %(total)s sections",
                        source.progress_total or 2,  # not known yet: "…", in the plural
                    )
                    % {"done": source.progress_done, "total": source.progress_total or "…"},
                )
            if source.progress_total:
                return format_html(
                    '<span class="kk-running">{}</span>',
                    gettext("Syncing: %(done)s of %(total)s")
                    % {"done": source.progress_done, "total": source.progress_total},
                )
            return format_html(
                '<span class="kk-running">{}</span>', gettext("Syncing: %(done)s read") % {"done": source.progress_done}
            )
        if source.last_error:
            return format_html('<span class="kk-failed">{}</span>', gettext("Failed: %s") % source.last_error)
        if source.synced_at is None:
            return gettext("Never synced")
        return gettext("Synced %(when)s") % {"when": date_format(source.synced_at, "SHORT_DATETIME_FORMAT")}

    @admin.display(description=_("last result"))
    def last_result_shown(self, source):
        return result_text(source.last_result)  # None before any sync: the admin's empty value
