"""The Assistant page (chat/assistant/versions.py): Support's one page for
what the team makes of the assistant. A form with the draft (else what is
live): the guidance, and the name, greeting and starter questions in each
language; what the guidance costs, as it is typed; Save draft and Publish;
what the draft changes since the published version; the versions kept, each
restorable as the draft.

It is the changelist of chat.AssistantVersion, and the model's only page: a
version is never edited, so there is no add, change or delete page. Opening
it takes the view permission; saving, publishing and restoring take add and
change (every one of them makes or stamps a version).

Finance reads only the cost, on the usage ledger: billing imports no chat
code, so the readout is a receiver of billing.admin.ledger_readouts,
connected below (this module loads with the admin, as the ledger's page does).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import formats
from django.utils.text import capfirst
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from base.admin import BadFilterValue, ModelAdmin, bad_filter
from billing import calibration
from billing.admin import ledger_readouts
from chat.admin import preview
from chat.assistant import versions
from chat.models import AssistantVersion

SHOWN_VERSIONS = 20
# What the guidance's help offers as examples: rules in the team's words.
EXAMPLES = (
    _("Call paid plans memberships"),
    _("Never promise a refund: offer a person"),
    _("Ask for the order number before looking an order up"),
)
LANGUAGES = (("en", _("English")), ("pt_br", _("Brazilian Portuguese")))
# The number in the texts the page's script fills in as the guidance is typed.
N = "{n}"


def label(name: str) -> str:
    """A field's label: the model's own words ("Name (English)")."""
    return capfirst(AssistantVersion._meta.get_field(name).verbose_name)


def grouped(number: int) -> str:
    return formats.number_format(number, force_grouping=True)


def chars_per_token() -> float:
    """The configured model's learnt characters per token, for its prompts."""
    calibration.load(settings.OPENAI_MODEL)
    return calibration.ratios(settings.OPENAI_MODEL)[0]


def guidance_tokens(text: str) -> int:
    return versions.guidance_tokens(text, chars_per_token())


# --- the form ------------------------------------------------------------------------------------


class AssistantForm(forms.Form):
    """The draft's values; versions.clean() is their one judge."""

    guidance = forms.CharField(
        label=label("guidance"),
        required=False,
        widget=forms.Textarea(
            attrs={"rows": 14, "class": "vLargeTextField", "aria-describedby": "kk-guidance-help kk-guidance-figures"}
        ),
    )

    def __init__(self, *args: Any, editable: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for suffix, _language in LANGUAGES:
            self.fields[f"name_{suffix}"] = forms.CharField(
                label=label(f"name_{suffix}"), required=False, max_length=60
            )
            self.fields[f"greeting_{suffix}"] = forms.CharField(
                label=label(f"greeting_{suffix}"),
                required=False,
                max_length=500,
                widget=forms.Textarea(attrs={"rows": 3, "class": "vLargeTextField"}),
            )
            self.fields[f"starters_{suffix}"] = forms.CharField(
                label=label(f"starters_{suffix}"),
                required=False,
                widget=forms.Textarea(attrs={"rows": versions.MAX_STARTERS, "class": "vLargeTextField"}),
                help_text=gettext("One question a line, as a visitor would write it; %(count)s at most.")
                % {"count": versions.MAX_STARTERS},
            )
        for field in self.fields.values():
            field.disabled = not editable
        self.values: dict[str, Any] = {}

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        try:
            self.values = versions.clean(data)
        except ValidationError as e:
            for name, errors in e.message_dict.items():
                self.add_error(name if name in self.fields else None, errors)
        return data

    def languages(self) -> list[tuple[Any, list[forms.BoundField]]]:
        return [
            (language, [self[f"{kind}_{suffix}"] for kind in ("name", "greeting", "starters")])
            for suffix, language in LANGUAGES
        ]


def shown(value: Any) -> Any:
    """A value as the form and the page show it: starter questions one a line."""
    return "\n".join(value) if isinstance(value, list) else value


def initial_of(values: dict[str, Any]) -> dict[str, Any]:
    return {name: shown(value) for name, value in values.items()}


def figures(text: str, limit: int, per_token: float) -> dict[str, str]:
    """The guidance's length against the cap and its cost: as rendered now,
    and the texts the page's script fills in while it is typed (translated
    here, the number left as N)."""
    count_text = gettext("%(count)s / %(limit)s characters")
    over_text = gettext("%(count)s / %(limit)s characters: too long to save")
    none_text = gettext("No guidance: it adds nothing to model calls.")

    def cost(tokens: int, count: str) -> str:
        many = ngettext(
            "≈ %(count)s input token per model call (a help question makes two)",
            "≈ %(count)s input tokens per model call (a help question makes two)",
            tokens,
        )
        return many % {"count": count}

    chars = len(text)
    tokens = versions.guidance_tokens(text, per_token)
    shown_count = over_text if chars > limit else count_text
    return {
        "count": shown_count % {"count": grouped(chars), "limit": grouped(limit)},
        "cost": cost(tokens, grouped(tokens)) if tokens else none_text,
        "limit": str(limit),
        # As a string: a float would be localised (3,5 in Portuguese); repr
        # round-trips, so the script's arithmetic is the server's.
        "chars_per_token": repr(per_token),
        "thousands": formats.get_format("THOUSAND_SEPARATOR"),
        "count_template": count_text % {"count": N, "limit": grouped(limit)},
        "over_template": over_text % {"count": N, "limit": grouped(limit)},
        "none_template": none_text,
        "one_template": cost(1, N),
        "many_template": cost(2, N),
    }


# --- the page ------------------------------------------------------------------------------------


@admin.register(AssistantVersion)
class AssistantVersionAdmin(ModelAdmin):
    """One page, no list of rows to edit: see the module's docstring."""

    template = "admin/chat/assistantversion/page.html"
    list_per_page = list_max_show_all = SHOWN_VERSIONS
    actions = None

    def get_urls(self):
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        view = self.admin_site.admin_view
        return [
            path("", view(self.changelist_view), name=f"{name}_changelist"),
            path("<int:pk>/restore/", view(self.restore_view), name=f"{name}_restore"),
            # The chat page itself, speaking as the draft would (chat/admin/preview.py).
            path("preview/", view(preview.preview_page), name=f"{name}_preview"),
        ]

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # versions are the page's history: none is ever deleted

    def may_edit(self, request: HttpRequest) -> bool:
        return self.has_add_permission(request) and self.has_change_permission(request)

    def _page_url(self) -> str:
        return reverse(f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_changelist")

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        # The versions, as the admin lists a model's rows: its lookup policy
        # (a parameter the page does not offer is a 400), a page of 20.
        try:
            kept = self.get_changelist_instance(request)
        except IncorrectLookupParameters:  # a page past the last
            return redirect(self._page_url())
        except BadFilterValue as e:
            return bad_filter(e)
        editable = self.may_edit(request)
        draft, live = versions.draft(), versions.live_version()
        if request.method == "POST":
            if not editable:
                raise PermissionDenied
            form = AssistantForm(request.POST)
            if form.is_valid():
                self._save(request, form.values, publish="_publish" in request.POST)
                return redirect(self._page_url())
        else:
            form = AssistantForm(initial=initial_of(versions.values_of(draft or live)), editable=editable)
        return self._render(request, form, kept, draft, live, editable)

    def _save(self, request: HttpRequest, values: dict[str, Any], *, publish: bool) -> None:
        """Save draft, or Publish: the form saved as a draft first when it changed."""
        latest = versions.latest()
        version = versions.save_draft(values, request.user)
        if not publish:
            if latest is not None and version.pk == latest.pk:
                messages.info(request, gettext("Nothing changed: nothing was saved."))
            else:
                messages.success(request, gettext("Draft saved."))
            return
        live = versions.live_version()
        if live is not None and live.pk == version.pk:
            messages.info(request, gettext("Nothing to publish: visitors meet this version already."))
            return
        versions.publish(version, request.user)
        messages.success(request, gettext("Published: visitors meet it from their next message."))

    def restore_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        if not self.may_edit(request):
            raise PermissionDenied
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        version = get_object_or_404(AssistantVersion, pk=pk)
        draft = versions.draft()
        if draft is not None and draft.pk == version.pk:
            messages.info(request, gettext("Version #%(id)s is the draft already.") % {"id": version.pk})
        else:
            versions.restore(version, request.user)
            message = gettext("Version #%(id)s is back as the draft: publish it to make it live.")
            messages.success(request, message % {"id": version.pk})
        return redirect(self._page_url())

    def _render(
        self,
        request: HttpRequest,
        form: AssistantForm,
        kept: ChangeList,
        draft: AssistantVersion | None,
        live: AssistantVersion | None,
        editable: bool,
    ) -> HttpResponse:
        text = str(form["guidance"].value() or "").replace("\r\n", "\n").strip()
        on_form = draft or live
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": gettext("Assistant"),
            "form": form,
            "editable": editable,
            "draft": draft,
            "live": live,
            "examples": EXAMPLES,
            "figures": figures(text, settings.KOOKEE_GUIDANCE_CHARS, chars_per_token()),
            "changes": [
                (label(name), shown(before), shown(after)) for name, before, after in versions.changes(live, draft)
            ]
            if draft is not None
            else None,
            "cl": kept,
            "on_form_pk": on_form.pk if on_form else None,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.template, context)


# --- Finance's readout, on the usage ledger ------------------------------------------------------


def guidance_readout(**kwargs: Any) -> str:
    """What the live guidance adds to every model call, in tokens; never its text."""
    guidance = versions.live().guidance
    if not guidance:
        return gettext("The assistant has no team guidance.")
    tokens = guidance_tokens(guidance)
    message = ngettext(
        "The team's guidance adds ≈ %(count)s input token to every model call.",
        "The team's guidance adds ≈ %(count)s input tokens to every model call.",
        tokens,
    )
    return message % {"count": grouped(tokens)}


ledger_readouts.connect(guidance_readout, dispatch_uid="chat.guidance_readout")
