"""Isolation probes for the dashboard pages: a workflow recipe of org A for the recipe routes
(the memory routes use the memory the governance probes register)."""

from tests.isolation import page_param, world_builder


@world_builder
def review(world) -> None:
    from apps.review import services
    from apps.tenants.principal import Principal

    world.objects["recipe_a"] = services.recipe_save(
        project=world.alice.project,
        actor=Principal.for_user(world.alice.user),
        task_pattern="Ship a release",
        steps=[{"order": 1, "description": "Tag the commit"}],
    )


@page_param("recipe_id")
def _recipe_id(world):
    return world.recipe_a.id


@page_param("session_id")
def _session_id(world):
    return world.session_a.id  # opened by tests/observer/isolation.py
