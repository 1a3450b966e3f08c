from django.shortcuts import get_object_or_404, render
from django.utils.cache import patch_cache_control
from django.views.decorators.clickjacking import xframe_options_exempt

from chat import embed, help_center, services, tools
from chat.models import HelpArticle

HELP_QUERY_CHARS = 200

# Defence in depth for pages that show model text: even if markup slipped
# through the renderer, no inline script or foreign resource would load.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self' {socket}; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors {ancestors}"
)


def _with_policy(request, response, ancestors: str = "'none'"):
    # The socket's origin is named too: older browsers' 'self' omits ws(s):.
    socket = f"{'wss' if request.is_secure() else 'ws'}://{request.get_host()}"
    response["Content-Security-Policy"] = CONTENT_SECURITY_POLICY.format(socket=socket, ancestors=ancestors)
    return response


def _private(response):
    # The page carries a per-visitor secret (a session cookie, a widget
    # token) or their conversation: no shared cache may keep or replay it.
    patch_cache_control(response, private=True, no_store=True)
    return response


def index(request):
    """The chat page. Establishes the visitor's session, which the WebSocket
    handshake then needs; stores nothing else until they write."""
    session = request.session
    try:
        visitor = services.visitor_for_session(session)
    except services.Refused:
        # They started over: a new key, keeping the rest (a staff login).
        if session.keys():
            session.cycle_key()
        else:
            session.mint()
        visitor = services.visitor_for_session(session)
    if visitor is None:
        # A new visitor, or a cookie for a session that expired or is gone:
        # a minted key, which costs no row (chat/sessions.py).
        session.mint()
        visitor = services.visitor_for_session(session)
    history = services.history_of(services.conversation_of(visitor))
    return _private(_with_policy(request, render(request, "chat/index.html", {"history": history})))


@xframe_options_exempt  # framing is governed by frame-ancestors instead
def embed_page(request):
    """The widget's chat, framed by a customer's page (static/chat/widget.js).

    It sets no cookie: the visitor is known by a token (chat/embed.py). The
    one here is fresh, for a first visit; a returning visitor's comes from
    the host page, in the URL fragment. The history comes over the
    WebSocket, for whichever token the page settles on.
    """
    response = render(request, "chat/embed.html", {"token": embed.new_token()})
    return _private(_with_policy(request, response, ancestors=embed.frame_ancestors()))


def help_article(request, slug: str):
    article = get_object_or_404(HelpArticle, slug=slug, published=True)
    return _with_policy(request, render(request, "chat/help_article.html", {"article": article}))


def help_index(request):
    """The help center for visitors: every published article, or those that
    answer a search (the assistant's own search, relevance floor included)."""
    query = request.GET.get("q", "").strip()[:HELP_QUERY_CHARS]
    snapshot = help_center.current_sync()
    if query:
        articles = tools.search_in(snapshot, query)["articles"]
    else:
        articles = [{"title": d.title, "url": d.url} for d in sorted(snapshot.index.documents, key=lambda d: d.title)]
    context = {"query": query, "articles": articles}
    return _with_policy(request, render(request, "chat/help_index.html", context))
