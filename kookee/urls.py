from django.contrib import admin
from django.urls import path

from chat import views

urlpatterns = [
    path("", views.index, name="index"),
    path("embed/", views.embed_page, name="embed"),
    path("help/<slug:slug>/", views.help_article, name="help-article"),
    path("admin/", admin.site.urls),
]
