from django.contrib import admin
from django.urls import include, path, re_path
from django.utils.translation import gettext_lazy as _
from django.views.generic import RedirectView
from django.views.i18n import JavaScriptCatalog

from chat import views
from chat.ops import monitoring
from chat.support import api
from kookee import admin as kookee_admin
from kookee import forbidden

# The admin's own name for staff, in its header and page titles.
admin.site.site_header = _("Kookee chat")
admin.site.site_title = _("Kookee chat admin")
admin.site.index_title = _("Support and finance")

# Another role's admin page: the admin's own page saying whose it is; a plain 403 elsewhere.
handler403 = forbidden.permission_denied

urlpatterns = [
    path("", views.index, name="index"),
    path("embed/", views.embed_page, name="embed"),
    # Whether a page's origin may show the widget (static/chat/widget.js asks first).
    path("embed/allowed", views.embed_allowed, name="embed-allowed"),
    # The chat page's language switch (Django's set_language).
    path("i18n/", include("django.conf.urls.i18n")),
    # The chat's own strings in the visitor's language (static/chat/*.js).
    path("jsi18n/", JavaScriptCatalog.as_view(packages=["chat"]), name="javascript-catalog"),
    path("help/", include("helpcenter.urls")),
    # A visitor's way back from the email of a reply (chat/support/replies.py).
    path("conversation/<str:token>/", views.continue_conversation, name="continue"),
    # A helpdesk's replies to a visitor (chat/support/api.py).
    path("api/handoffs/<int:pk>/messages", api.handoff_messages, name="handoff-messages"),
    # The articles' admin pages before they moved to the helpcenter app.
    re_path(
        r"^admin/chat/helparticle/(?P<rest>.*)$",
        RedirectView.as_view(url="/admin/helpcenter/article/%(rest)s", permanent=True, query_string=True),
    ),
    path("admin/", kookee_admin.urls(admin.site)),
    # The operator's: the load balancer's check, and each process's metrics.
    path("healthz", monitoring.healthz, name="healthz"),
    path("metrics", monitoring.metrics_page, name="metrics"),
]
