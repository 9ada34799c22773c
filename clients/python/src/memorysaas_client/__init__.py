"""memorysaas's client: the SDK (`Client`), the `memorysaas` command, a stdio MCP server and the
device's offline libSQL replica. Light on purpose: no Django, no torch."""

from __future__ import annotations

__version__ = "0.1.0"

from memorysaas_client.errors import ApiError, MemorysaasError, Unreachable
from memorysaas_client.sdk import Client

__all__ = ["ApiError", "Client", "MemorysaasError", "Unreachable", "__version__"]
