"""Actions in the admin (chat/actions/): the operations of the customer's API
the model may call, imported from their OpenAPI document; the credentials
the calls carry, write-only; a Test page that calls the live API as a turn
would, without a model; and the calls made in turns, which Support reads.

Actions and their credentials are the superusers' alone, whatever model
permissions a user holds, as the help center's sources are: an action sends
a visitor's verified identity and a stored secret to an address a document
chose. Nothing here ever renders a secret back: it is sealed when set, and
masked wherever the Test page shows the request and the answer.
"""

import json
from urllib.parse import quote

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch, TextField
from django.db.models.functions import Cast
from django.shortcuts import get_object_or_404, redirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from base.admin import ModelAdmin, WrittenByTheApp
from chat.actions import catalog, openapi, runner
from chat.engine import provider, tools
from chat.models import Action, ActionCall, ActionScheme
from chat.visitors.verified import Person

OFFLINE = _(
    "Actions need a real model: the built-in offline model does not call them. Set OPENAI_API_KEY or OPENAI_BASE_URL."
)
SHOWN_BYTES = 64 * 1024  # of an answer, on the Test page
MASK = "••••"


def calls_in_transcript() -> Prefetch:
    """A turn's calls of actions, for its transcript, in the one query for
    all its turns; the arguments as JSON text, as the tool calls' are."""
    calls = ActionCall.objects.select_related("action").annotate(arguments_json=Cast("arguments", TextField()))
    return Prefetch("action_calls", queryset=calls.order_by("started_at", "id"))


def _pretty(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _operation(action: Action) -> openapi.Operation | None:
    """The stored operation, or None when it cannot be read (import the document again)."""
    try:
        return catalog.operation_of(action.spec)
    except (TypeError, ValueError, AttributeError):
        return None


def _offer(action: Action, operation: openapi.Operation) -> catalog.Offer:
    return catalog.Offer(action.id, action.name, action.title, action.description, operation)


def _scheme_names(operations) -> list[str]:
    return sorted({name for op in operations if op for alternative in op.security for name in alternative})


def _masked(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK).replace(quote(secret, safe=""), MASK)
    return text


class SuperusersOnly:
    """The superusers' alone, as the help center's sources (helpcenter/admin.py)."""

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return self.has_module_permission(request)

    def has_add_permission(self, request):
        return False  # an action and a credential come from the document

    def has_change_permission(self, request, obj=None):
        return self.has_module_permission(request)

    def has_delete_permission(self, request, obj=None):
        return self.has_module_permission(request)


class ImportForm(forms.Form):
    document = forms.FileField(
        label=_("OpenAPI document"), help_text=_("OpenAPI 3.0 or 3.1, JSON or YAML; 2 MB at most.")
    )
    base_url = forms.CharField(
        label=_("API address"),
        required=False,
        max_length=500,
        help_text=_("Replaces the document's servers, such as https://api.example.com/v1. Empty: the document's."),
    )
    switched_off = forms.BooleanField(
        label=_("import switched off"),
        required=False,
        help_text=_(
            "New actions start disabled: test them, then enable them. A re-import leaves the others as they are."
        ),
    )

    def clean_document(self):
        upload = self.cleaned_data["document"]
        if upload.size > openapi.MAX_BYTES:
            raise forms.ValidationError(_("The document is larger than 2 MB."))
        try:
            return upload.read().decode("utf-8-sig")
        except UnicodeDecodeError:
            raise forms.ValidationError(_("The document is not UTF-8 text.")) from None


def _json_object(text: str, what: str) -> dict:
    try:
        value = json.loads(text or "{}")
    except ValueError as e:
        raise forms.ValidationError(gettext("%(what)s is not JSON: %(error)s") % {"what": what, "error": e}) from None
    if not isinstance(value, dict):
        raise forms.ValidationError(gettext("%(what)s must be a JSON object: {…}") % {"what": what})
    return value


class TestForm(forms.Form):
    arguments = forms.CharField(
        label=_("example arguments"),
        initial="{}",
        widget=forms.Textarea(attrs={"rows": 6, "class": "vLargeTextField"}),
        help_text=_("A JSON object, as the model would send it (the tool definition below says what it takes)."),
    )
    person_id = forms.CharField(
        label=_("verified id"), required=False, max_length=200, help_text=_("Empty: act as a visitor not signed in.")
    )
    person_name = forms.CharField(label=_("verified name"), required=False, max_length=200)
    person_email = forms.CharField(label=_("verified email"), required=False, max_length=200)
    person_attributes = forms.CharField(
        label=_("verified attributes"),
        required=False,
        initial="{}",
        widget=forms.Textarea(attrs={"rows": 3, "class": "vLargeTextField"}),
        help_text=_("A flat JSON object, as the customer's site signs it."),
    )
    send = forms.BooleanField(label=_("Send it: this request changes data on the live API"), required=True)

    def __init__(self, *args, confirm: bool, **kwargs):
        super().__init__(*args, **kwargs)
        if not confirm:
            del self.fields["send"]

    def clean_arguments(self):
        return _json_object(self.cleaned_data["arguments"], gettext("The example arguments"))

    def clean_person_attributes(self):
        attributes = _json_object(self.cleaned_data["person_attributes"], gettext("The attributes"))
        if any(isinstance(value, (dict, list)) for value in attributes.values()):
            raise forms.ValidationError(_("The attributes must be flat: text, numbers, true, false or null."))
        return attributes

    def person(self) -> Person | None:
        data = self.cleaned_data
        if not data["person_id"]:
            return None
        attributes = tuple(data["person_attributes"].items())
        return Person(data["person_id"], data["person_name"], data["person_email"], attributes)


@admin.register(Action)
class ActionAdmin(SuperusersOnly, ModelAdmin):
    list_display = ["name", "title", "endpoint", "enabled", "needs_identity", "asks_to_confirm", "in_document"]
    list_filter = ["enabled", "in_document"]
    search_fields = ["name", "title"]
    actions = ["enable", "disable"]
    fields = [
        *("name", "title", "description", "enabled", "endpoint", "base_url", "in_document", "texts_edited"),
        *("needs_identity", "asks_to_confirm", "parameters", "tool_definition", "imported_at", "updated_at"),
    ]
    change_form_template = "admin/chat/action/change_form.html"
    change_list_template = "admin/chat/action/change_list.html"

    def get_readonly_fields(self, request, obj=None):
        editable = {"title", "description", "enabled"}
        if obj is not None and not obj.in_document:
            editable.discard("enabled")  # the API may no longer have it: import the document again
        return [field for field in self.fields if field not in editable]

    def get_urls(self):
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        view = self.admin_site.admin_view
        return [
            path("import/", view(self.import_view), name=f"{name}_import"),
            path("<int:pk>/test/", view(self.test_view), name=f"{name}_test"),
            *super().get_urls(),
        ]

    def changelist_view(self, request, extra_context=None):
        if request.method == "GET" and provider.is_offline() and self.has_view_permission(request):
            messages.warning(request, OFFLINE)
        return super().changelist_view(request, extra_context)

    def save_model(self, request, obj, form, change):
        if change and {"title", "description"} & set(form.changed_data):
            obj.texts_edited = True  # staff's own texts survive a re-import of the document
        super().save_model(request, obj, form, change)

    @admin.action(description=_("Enable the selected actions"))
    def enable(self, request, queryset):
        gone = sorted(queryset.filter(in_document=False).values_list("name", flat=True))
        if gone:
            message = gettext("Not enabled, no longer in the document (import it again): %(names)s")
            self.message_user(request, message % {"names": ", ".join(gone)}, messages.WARNING)
        chosen = list(queryset.filter(in_document=True))
        Action.objects.filter(pk__in=[a.pk for a in chosen]).update(enabled=True, updated_at=timezone.now())
        count = len(chosen)
        done = ngettext("Enabled %(count)d action.", "Enabled %(count)d actions.", count) % {"count": count}
        self.message_user(request, done, messages.SUCCESS)
        self._warn_of_missing_secrets(request, _scheme_names(_operation(a) for a in chosen))

    @admin.action(description=_("Disable the selected actions"))
    def disable(self, request, queryset):
        count = queryset.update(enabled=False, updated_at=timezone.now())
        done = ngettext("Disabled %(count)d action.", "Disabled %(count)d actions.", count) % {"count": count}
        self.message_user(request, done, messages.SUCCESS)

    def _warn_of_missing_secrets(self, request, names):
        missing = catalog.schemes_without_secret(names)
        if missing:
            message = gettext(
                "Calls need a credential that is not set yet: %(names)s. Set it under Action credentials."
            )
            self.message_user(request, message % {"names": ", ".join(missing)}, messages.WARNING)

    def _page(self, request, template, context):
        request.current_app = self.admin_site.name
        context = {**self.admin_site.each_context(request), "opts": self.opts, **context}
        return TemplateResponse(request, f"admin/chat/action/{template}", context)

    def import_view(self, request):
        if not self.has_change_permission(request):
            raise PermissionDenied
        posted = request.method == "POST"
        form = ImportForm(request.POST if posted else None, request.FILES if posted else None)
        if form.is_valid():
            data = form.cleaned_data
            try:
                document = openapi.parse(data["document"])
                report = catalog.import_document(
                    document, enabled=not data["switched_off"], base_url=data["base_url"].strip()
                )
            except (openapi.BadDocument, catalog.ImportRefused) as e:
                messages.error(request, gettext("Nothing was imported: %(reason)s") % {"reason": e})
            else:
                messages.success(request, gettext("Imported: %(summary)s.") % {"summary": report.summary()})
                if report.skipped:
                    skipped = gettext("Not actions (no operationId, or not callable): %(operations)s")
                    messages.info(request, skipped % {"operations": "; ".join(report.skipped)})
                self._warn_of_missing_secrets(request, report.schemes)
                return redirect("admin:chat_action_changelist")
        fieldsets = [(None, {"fields": list(form.fields)})]
        adminform = helpers.AdminForm(form, fieldsets, {}, model_admin=self)
        title = gettext("Import an OpenAPI document")
        return self._page(request, "import.html", {"title": title, "adminform": adminform, "form": form})

    def test_view(self, request, pk):
        if not self.has_change_permission(request):
            raise PermissionDenied
        action = get_object_or_404(Action, pk=pk)
        operation = _operation(action)
        context = {"title": gettext("Test %(name)s") % {"name": action.name}, "action": action, "original": action}
        if operation is None:
            messages.error(request, gettext("This action's operation cannot be read: import the document again."))
            return self._page(request, "test.html", context)
        offer = _offer(action, operation)
        form = TestForm(request.POST if request.method == "POST" else None, confirm=operation.confirm)
        if form.is_valid():
            arguments = form.cleaned_data["arguments"]
            names = {name for alternative in operation.security for name in alternative}
            caller = runner.Caller(
                form.person(),
                None,
                catalog.own_hosts(request.get_host()),
                counted=False,
                credentials=catalog.credentials(names),
            )
            result = async_to_sync(runner.call)(offer, caller, arguments)
            ignored = [param.name for param in operation.params if param.visitor and param.name in arguments]
            context["result"] = self._shown(result)
            context["ignored"] = ignored
        fieldsets = [(None, {"fields": list(form.fields)})]
        context["adminform"] = helpers.AdminForm(form, fieldsets, {}, model_admin=self)
        context["form"] = form
        context["tool"] = _pretty(tools.action_tool(offer, runner.Caller(None, None)).spec())
        context["missing"] = catalog.schemes_without_secret(_scheme_names([operation]))
        return self._page(request, "test.html", context)

    def _shown(self, result: runner.Result) -> dict:
        """A test call as staff read it: every secret it carried masked, in the
        request and in anything the API sent back (an API may echo it)."""
        secrets = result.request.secret_values if result.request else ()
        shown = {"record": result.record, "for_model": _masked(_pretty(result.for_model), secrets)}
        if result.request is not None:
            shown["request"] = result.request.shown()
        if result.response is not None:
            body = result.response.body[:SHOWN_BYTES].decode("utf-8", errors="replace")
            shown["response"] = {
                "status": result.response.status,
                "content_type": _masked(result.response.content_type, secrets),
                "body": _masked(body, secrets),
                "cut": len(result.response.body) > SHOWN_BYTES,
            }
        return shown

    @admin.display(description=_("method and path"))
    def endpoint(self, action):
        return f"{action.method} {action.path}"

    @admin.display(boolean=True, description=_("needs a verified visitor"))
    def needs_identity(self, action):
        operation = _operation(action)
        return None if operation is None else operation.needs_identity

    @admin.display(boolean=True, description=_("asks to confirm"))
    def asks_to_confirm(self, action):
        operation = _operation(action)
        return None if operation is None else operation.confirm

    @admin.display(description=_("parameters"))
    def parameters(self, action):
        operation = _operation(action)
        if operation is None:
            return gettext("The operation cannot be read: import the document again.")
        return render_to_string("admin/chat/action/parameters.html", {"params": operation.params})

    @admin.display(description=_("what the model reads"))
    def tool_definition(self, action):
        operation = _operation(action)
        if operation is None:
            return None  # the admin's empty value
        spec = tools.action_tool(_offer(action, operation), runner.Caller(None, None)).spec()
        return format_html('<pre class="kk-tool">{}</pre>', _pretty(spec))


class SchemeForm(forms.ModelForm):
    new_secret = forms.CharField(
        label=_("new secret"),
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text=_(
            "Stored sealed, never shown again. Leave empty to keep the current one. "
            "A bearer token, an API key, or user:password for HTTP basic."
        ),
    )
    remove_secret = forms.BooleanField(label=_("remove the secret"), required=False)

    class Meta:
        model = ActionScheme
        fields = ["new_secret", "remove_secret"]

    def clean(self):
        cleaned = super().clean()
        secret = cleaned.get("new_secret") or ""
        if secret and cleaned.get("remove_secret"):
            raise forms.ValidationError(_("Give a new secret or remove the secret, not both."))
        if any(ord(c) < 32 or ord(c) == 127 for c in secret):
            self.add_error("new_secret", _("A secret may not hold a line break or another control character."))
        elif secret and self.instance.kind == ActionScheme.Kind.BASIC and ":" not in secret:
            self.add_error("new_secret", _("HTTP basic takes user:password."))
        return cleaned


@admin.register(ActionScheme)
class ActionSchemeAdmin(SuperusersOnly, ModelAdmin):
    form = SchemeForm
    list_display = ["name", "kind", "param", "secret_is_set", "secret_set_at"]
    list_filter = ["kind"]
    fields = ["name", "kind", "param", "secret_is_set", "secret_set_at", "new_secret", "remove_secret"]
    readonly_fields = ["name", "kind", "param", "secret_is_set", "secret_set_at"]

    def save_model(self, request, obj, form, change):
        # Nothing else of a scheme is edited here: the document says what it is.
        if form.cleaned_data.get("remove_secret"):
            catalog.set_secret(obj.name, "")
        elif form.cleaned_data.get("new_secret"):
            catalog.set_secret(obj.name, form.cleaned_data["new_secret"])

    @admin.display(boolean=True, description=_("set"))
    def secret_is_set(self, scheme):
        return bool(scheme.secret_sealed)


@admin.register(ActionCall)
class ActionCallAdmin(WrittenByTheApp, ModelAdmin):
    """The calls made in turns: Support's to read (chat.view_actioncall)."""

    list_display = ["started_at", "action", "outcome", "http_status", "duration_ms", "turn_link"]
    list_filter = ["outcome", "action"]
    date_hierarchy = "started_at"
    ordering = ["-started_at", "-id"]
    fields = [
        *("turn_link", "action_title", "call_id", "arguments_shown", "outcome", "http_status", "detail"),
        *("duration_ms", "response_bytes", "started_at"),
    ]
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("action", "turn")

    @admin.display(description=_("turn"))
    def turn_link(self, call):
        url = reverse("admin:chat_conversation_change", args=[call.turn.conversation_id]) + f"#turn-{call.turn_id}"
        return format_html('<a href="{}">{}</a>', url, gettext("Turn %(id)s, in its transcript") % {"id": call.turn_id})

    @admin.display(description=_("action"))
    def action_title(self, call):
        return f"{call.action.title} ({call.action.name})"

    @admin.display(description=_("arguments"))
    def arguments_shown(self, call):
        if call.turn.erased_at:
            return gettext("(erased)")
        return format_html("<pre>{}</pre>", _pretty(call.arguments))
