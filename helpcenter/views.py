from django.shortcuts import get_object_or_404, render

from base.pages import with_policy
from helpcenter import index, passages, search
from helpcenter.models import Article

QUERY_CHARS = 200


def article(request, slug: str):
    found = get_object_or_404(Article, slug=slug, published=True)
    context = {"article": found, "anchors": passages.anchors(found.body)}
    return with_policy(request, render(request, "helpcenter/article.html", context))


def article_list(request):
    """The help center for visitors: every published article, or those that
    answer a search (the assistant's own search, relevance floor included)."""
    query = request.GET.get("q", "").strip()[:QUERY_CHARS]
    if query:
        # The page lists what answers; the closest that do not are for a model to judge.
        articles = [a for a in search.search_sync(query)["articles"] if a["confidence"] == search.HIGH]
    else:
        documents = index.current_sync().index.documents
        articles = [{"title": d.title, "url": d.url} for d in sorted(documents, key=lambda d: d.title)]
    context = {"query": query, "articles": articles}
    return with_policy(request, render(request, "helpcenter/index.html", context))
