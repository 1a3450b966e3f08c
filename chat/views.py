from django.shortcuts import get_object_or_404, render

from chat import services
from chat.models import HelpArticle


def index(request):
    """The chat page. Establishes the visitor's session, which the WebSocket
    handshake then needs."""
    conversation = services.conversation_for_session(request.session)
    if conversation is None:
        # A new visitor, or a cookie for a session that expired or is gone.
        request.session.create()
        conversation = services.conversation_for_session(request.session)
    return render(request, "chat/index.html", {"history": services.history(conversation)})


def help_article(request, slug: str):
    article = get_object_or_404(HelpArticle, slug=slug, published=True)
    return render(request, "chat/help_article.html", {"article": article})
