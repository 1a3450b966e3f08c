from django.urls import path

from helpcenter import views

urlpatterns = [
    path("", views.article_list, name="help-index"),
    path("<slug:slug>/", views.article, name="help-article"),
]
