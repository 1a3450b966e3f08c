from urllib.parse import urlsplit

from django.conf import settings
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.utils.cache import patch_cache_control, patch_vary_headers
from django.views.decorators.clickjacking import xframe_options_exempt
from django.views.decorators.http import require_GET

from base.pages import private, with_policy
from chat.assistant import versions
from chat.engine import history
from chat.support import replies
from chat.visitors import access, embed


def index(request):
    """The chat page. Establishes the visitor's session, which the WebSocket
    handshake then needs; stores nothing else until they write."""
    session = request.session
    try:
        visitor = access.visitor_for_session(session)
    except access.Refused:
        # They started over: a new key, keeping the rest (a staff login).
        if session.keys():
            session.cycle_key()
        else:
            session.mint()
        visitor = access.visitor_for_session(session)
    if visitor is None:
        # A new visitor, or a cookie for a session that expired or is gone:
        # a minted key, which costs no row (chat/visitors/sessions.py).
        session.mint()
        visitor = access.visitor_for_session(session)
    page = history.history_of(access.conversation_of(visitor))
    # The language switch names each language in itself (settings.LANGUAGES, untranslated).
    context = {"history": page, "face": face_for(request), "languages": settings.LANGUAGES}
    return private(with_policy(request, render(request, "chat/index.html", context)))


def face_for(request) -> versions.Face:
    """What the visitor meets before they write (the live version's name,
    greeting and starter questions), in the request's language: rendered
    into the page, the widget's frame as well, so that no request waits for it."""
    face = versions.live().face(request.LANGUAGE_CODE)
    return versions.Face(face.name, face.greeting, face.starters[: versions.MAX_STARTERS])


@xframe_options_exempt  # framing is governed by frame-ancestors instead
def embed_page(request):
    """The widget's chat, framed by a customer's page (static/chat/widget.js).

    It sets no cookie: the visitor is known by a token (chat/visitors/embed.py).
    The one here is fresh, for a first visit; a returning visitor's comes
    from the host page, in the URL fragment. The history comes over the
    WebSocket, for whichever token the page settles on.

    The sites allowed to frame it (KOOKEE_EMBED_ORIGINS, as frame-ancestors
    has them) go to its script too: only their pages may hand it a verified
    visitor's identity (KookeeChat.identify, in static/chat/chat.js).
    """
    context = {
        "token": embed.new_token(),
        "parent_origins": " ".join(settings.KOOKEE_EMBED_ORIGINS),
        "face": face_for(request),
    }
    response = render(request, "chat/embed.html", context)
    return private(with_policy(request, response, ancestors=embed.frame_ancestors()))


@require_GET
def embed_allowed(request):
    """Whether the asking page's origin may show the widget's frame
    (static/chat/widget.js asks before making it): {"allowed": true|false},
    frame-ancestors' answer for /embed/, which a refused frame cannot tell
    its page. The origin is the browser's (Origin); a same-origin request
    has none, and the script names it in the query.

    Anyone may read it (CORS *, no cookie read or set): it says no more
    than /embed/'s own Content-Security-Policy header. A refusal is logged,
    once per origin (chat/visitors/embed.py)."""
    origin = request.headers.get("Origin") or request.GET.get("origin", "")
    site = urlsplit(settings.KOOKEE_SITE_URL)  # 'self' is this origin, as reached or as named
    own = [f"{request.scheme}://{request.get_host()}", f"{site.scheme}://{site.netloc}"]
    response = JsonResponse({"allowed": embed.may_frame(origin, own)})
    response["Access-Control-Allow-Origin"] = "*"
    patch_vary_headers(response, ["Origin"])
    # A changed KOOKEE_EMBED_ORIGINS is seen within the minute.
    patch_cache_control(response, max_age=60)
    return response


def continue_conversation(request, token):
    """The link in the email of a reply (chat/support/replies.py): the
    conversation, in this browser. A button, not the link itself, moves it
    here: mail scanners open links, and must not take conversations.

    The conversation moves to a fresh key of this browser's session: the
    browser it was on before no longer reaches it (a link is a bearer token
    for one conversation, good for KOOKEE_REPLY_LINK_DAYS)."""
    conversation = replies.conversation_of_link(token)
    if conversation is None:
        response = render(request, "chat/continue.html", {"gone": True}, status=410)
        return private(with_policy(request, response))
    if request.method == "POST":
        session = request.session
        if session.keys():
            session.cycle_key()  # keeps a staff login, changes the visitor
        else:
            session.mint()
        visitor = access.visitor_for_session(session)
        if replies.move_to(conversation.id, visitor):
            return redirect("index")
        response = render(request, "chat/continue.html", {"gone": True}, status=410)
        return private(with_policy(request, response))
    response = render(request, "chat/continue.html", {"gone": False})
    return private(with_policy(request, response))
