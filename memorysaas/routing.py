"""Websocket routes, gathered from the apps that have consumers."""

from importlib import import_module

websocket_urlpatterns: list = []

for _app in ("review",):
    try:
        websocket_urlpatterns += import_module(f"apps.{_app}.routing").websocket_urlpatterns
    except ModuleNotFoundError as exc:
        if exc.name != f"apps.{_app}.routing":
            raise
