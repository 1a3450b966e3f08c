from django.shortcuts import get_object_or_404, render

from base.pages import with_policy
from helpcenter import index, search
from helpcenter.models import Article

QUERY_CHARS = 200


def article(request, slug: str):
    found = get_object_or_404(Article, slug=slug, published=True)
    return with_policy(request, render(request, "helpcenter/article.html", {"article": found}))


def article_list(request):
    """The help center for visitors: every published article, or those that
    answer a search (the assistant's own search, relevance floor included)."""
    query = request.GET.get("q", "").strip()[:QUERY_CHARS]
    snapshot = index.current_sync()
    if query:
        # The page lists what answers; the closest that do not are for a model to judge.
        articles = [a for a in search.search_in(snapshot, query)["articles"] if a["confidence"] == search.HIGH]
    else:
        articles = [{"title": d.title, "url": d.url} for d in sorted(snapshot.index.documents, key=lambda d: d.title)]
    context = {"query": query, "articles": articles}
    return with_policy(request, render(request, "helpcenter/index.html", context))
