"""Form bodies are Django's to read, not the web server's.

Twisted (under daphne) parses every multipart/form-data and urlencoded body into `request.args`
before the application sees the request, and answers a body it cannot parse itself: a 400 with
no body at all, not our JSON envelope (an empty multipart upload to graph/index got one). Daphne
never reads `request.args` (it hands the raw body to Django), so that parse is wasted work and
memory on every upload too. Twisted's request takes `parsePOSTFormSubmission` for this; daphne
builds its requests without it, so this sets it off for daphne's request class.
"""

from __future__ import annotations

import functools

from daphne.http_protocol import WebRequest


def leave_form_bodies_to_django() -> None:
    """Make daphne's requests skip Twisted's form parsing (idempotent)."""
    if getattr(WebRequest.__init__, "_forms_left_to_django", False):
        return
    original = WebRequest.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("parsePOSTFormSubmission", False)
        original(self, *args, **kwargs)

    __init__._forms_left_to_django = True
    WebRequest.__init__ = __init__
