"""Refuse webhook URLs that would make the server call inside its own network (SSRF).

The host is resolved, and every address it resolves to is checked: one loopback, private,
link-local (cloud metadata at 169.254.169.254), multicast, reserved or unspecified address is
enough to refuse the URL, unless WEBHOOKS_ALLOW_PRIVATE_URLS is set (a self-hosted receiver,
tests). The check runs when an endpoint is saved and again before every request, since what a
name resolves to can change; redirects are never followed.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit


class UnsafeUrl(ValueError):
    pass


def _refused(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or not address.is_global
    )


def resolve(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise UnsafeUrl(f"The host {host!r} does not resolve.") from exc
    return sorted({info[4][0] for info in infos})


def check_url(url: str, *, allow_private: bool) -> list[str]:
    """The addresses `url`'s host resolves to; raises UnsafeUrl for a URL that must not be called."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise UnsafeUrl("A webhook URL must start with http:// or https://.")
    if not parts.hostname:
        raise UnsafeUrl("A webhook URL must name a host.")
    if parts.username or parts.password:
        raise UnsafeUrl("A webhook URL must not carry a user name or password.")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise UnsafeUrl("The URL's port is not a number from 0 to 65535.") from exc
    addresses = resolve(parts.hostname, port)
    if not allow_private:
        for raw in addresses:
            address = ipaddress.ip_address(raw.split("%", 1)[0])
            if _refused(address):
                raise UnsafeUrl(
                    f"{parts.hostname} resolves to {raw}, a private, loopback or link-local address;"
                    " webhooks are sent only to public addresses."
                )
    return addresses
