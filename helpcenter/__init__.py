"""The help center: its articles, their pages, and the search over them.

It stands alone: it knows nothing of chat. Other apps use it through
helpcenter.search only."""
