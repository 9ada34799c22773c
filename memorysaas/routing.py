"""Websocket routes: the project live-update socket, plus any an app adds in its routing module."""

from importlib import import_module

from django.urls import path

from memorysaas.consumers import ProjectConsumer

websocket_urlpatterns: list = [
    path("ws/projects/<uuid:project_id>/", ProjectConsumer.as_asgi()),
]

for _app in ("review",):
    try:
        websocket_urlpatterns += import_module(f"apps.{_app}.routing").websocket_urlpatterns
    except ModuleNotFoundError as exc:
        if exc.name != f"apps.{_app}.routing":
            raise
