from django.contrib import admin
from django.urls import path

from chat import monitoring, views

# The admin's own name for staff, in its header and page titles.
admin.site.site_header = "Kookee chat"
admin.site.site_title = "Kookee chat admin"
admin.site.index_title = "Support and finance"

urlpatterns = [
    path("", views.index, name="index"),
    path("embed/", views.embed_page, name="embed"),
    path("help/", views.help_index, name="help-index"),
    path("help/<slug:slug>/", views.help_article, name="help-article"),
    path("admin/", admin.site.urls),
    # The operator's: the load balancer's check, and each process's metrics.
    path("healthz", monitoring.healthz, name="healthz"),
    path("metrics", monitoring.metrics_page, name="metrics"),
]
