from django.contrib import admin

from base.admin import ModelAdmin
from helpcenter.models import Article


@admin.register(Article)
class ArticleAdmin(ModelAdmin):
    list_display = ["title", "slug", "published", "updated_at"]
    list_filter = ["published"]
    search_fields = ["title", "body"]
    prepopulated_fields = {"slug": ["title"]}
