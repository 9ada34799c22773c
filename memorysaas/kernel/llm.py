"""The one place that builds the OpenAI client for chat calls (observer synthesis, HyDE).

An LLM is configured when OPENAI_API_KEY is set; OPENAI_BASE_URL points the SDK at a compatible
server. Clients are kept per (key, base URL, timeout) so repeated calls reuse their connections.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:
    from openai import OpenAI


def llm_configured() -> bool:
    return bool(settings.OPENAI_API_KEY)


def chat_client(*, timeout: float) -> OpenAI:
    """An OpenAI client for the configured key and base URL; no retries (callers fall back)."""
    return _client(settings.OPENAI_API_KEY, settings.OPENAI_BASE_URL, float(timeout))


@lru_cache(maxsize=8)
def _client(api_key: str, base_url: str | None, timeout: float) -> OpenAI:
    from openai import OpenAI

    return OpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)
