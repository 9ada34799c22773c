"""`memorysaas login`: the OAuth 2.0 device authorization grant (RFC 8628), device side.

The device asks the service for a code pair (§3.1–3.2), shows the person the short user code and
where to enter it (§3.3), and polls the token endpoint (§3.4) no faster than the interval the
service gave — five seconds more each time the service answers `slow_down` (§3.5) — until the
person approves (the device's own API key comes back), denies (`access_denied`) or the code
expires (`expired_token`).
"""

from __future__ import annotations

import platform
import socket
import time
from collections.abc import Callable

from memorysaas_client.errors import ApiError, MemorysaasError
from memorysaas_client.models import DeviceCode, DeviceToken
from memorysaas_client.sdk import Client

CLIENT_ID = "memorysaas-cli"
SLOW_DOWN_STEP = 5  # seconds (RFC 8628 §3.5)


class LoginFailed(MemorysaasError):
    """The login ended without a key: denied, expired, or refused."""


def this_device() -> tuple[str, str]:
    """A name the person will recognise on the approval page, and the platform."""
    return socket.gethostname() or "device", f"{platform.system()} {platform.machine()}".strip()


def device_login(
    api: Client,
    *,
    announce: Callable[[DeviceCode], None],
    device_name: str,
    platform_name: str = "",
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> DeviceToken:
    code = api.device.start(client_id=CLIENT_ID, device_name=device_name, platform=platform_name)
    announce(code)
    interval = float(code.interval)
    deadline = clock() + code.expires_in
    while clock() < deadline:
        sleep(interval)
        try:
            return api.device.token(code.device_code, client_id=CLIENT_ID)
        except ApiError as error:
            if error.code == "authorization_pending":
                continue
            if error.code == "slow_down":
                asked = (error.details or {}).get("interval") if isinstance(error.details, dict) else None
                interval = float(asked) if asked else interval + SLOW_DOWN_STEP
                continue
            if error.code == "access_denied":
                raise LoginFailed("The login was denied on the approval page.") from None
            if error.code == "expired_token":
                raise LoginFailed(
                    "The code expired before anyone approved it: run `memorysaas login` again."
                ) from None
            raise LoginFailed(f"The service refused the login: {error.message}") from None
    raise LoginFailed("The code expired before anyone approved it: run `memorysaas login` again.")
