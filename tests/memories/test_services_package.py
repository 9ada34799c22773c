"""The services package re-exports every public write of its modules, so callers keep writing
`services.memory_create(...)` whichever module a function lives in."""

from __future__ import annotations

import inspect
import pkgutil
from importlib import import_module

from apps.memories import services


def test_every_public_function_of_a_services_module_is_reexported():
    missing = []
    for info in pkgutil.iter_modules(services.__path__):
        module = import_module(f"{services.__name__}.{info.name}")
        for name, value in vars(module).items():
            if name.startswith("_") or not inspect.isfunction(value) or value.__module__ != module.__name__:
                continue
            if getattr(services, name, None) is not value:
                missing.append(f"{info.name}.{name}")
    assert missing == []
