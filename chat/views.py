from django.shortcuts import render
from django.views.decorators.clickjacking import xframe_options_exempt

from base.pages import private, with_policy
from chat.engine import history
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
    return private(with_policy(request, render(request, "chat/index.html", {"history": page})))


@xframe_options_exempt  # framing is governed by frame-ancestors instead
def embed_page(request):
    """The widget's chat, framed by a customer's page (static/chat/widget.js).

    It sets no cookie: the visitor is known by a token (chat/visitors/embed.py).
    The one here is fresh, for a first visit; a returning visitor's comes
    from the host page, in the URL fragment. The history comes over the
    WebSocket, for whichever token the page settles on.
    """
    response = render(request, "chat/embed.html", {"token": embed.new_token()})
    return private(with_policy(request, response, ancestors=embed.frame_ancestors()))
