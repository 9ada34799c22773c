"""Isolation probes for the insights endpoints (project_id comes from the tenants probes)."""

from tests.isolation import api_param, api_request, page_param, world_builder


@world_builder
def insights(world) -> None:
    from apps.insights.models import PhaseWeightProposal, ThresholdAdjustment

    project = world.alice.project
    world.objects["proposal_a"] = PhaseWeightProposal.objects.create(
        organization=project.organization, project=project, sessions=30,
        report={"implement": {"gotcha": {"before": 1.5, "proposed": 1.8, "lift": 0.2, "interval": [0.1, 0.3],
                                         "n_with": 10, "n_without": 20}}},
    )  # fmt: skip
    world.objects["adjustment_a"] = ThresholdAdjustment.objects.create(
        organization=project.organization, project=project, signal_class="backtrack", factor=1.2,
        rejection_rate=0.5, promoted=10, rejected=5,
    )  # fmt: skip


@api_param("proposal_id")
def _proposal_id(world):
    return world.proposal_a.pk


@api_param("adjustment_id")
def _adjustment_id(world):
    return world.adjustment_a.pk


@api_request("PUT", "/api/v1/projects/{project_id}/experiment")
def _experiment(world):
    return {"body": {"enabled": True, "control_pct": 5, "passive_pct": 10}}


@api_request("POST", "/api/v1/projects/{project_id}/insights/phase-weights/{proposal_id}/apply")
def _apply(world):
    return {"body": {}}


@api_request("POST", "/api/v1/projects/{project_id}/insights/thresholds/{adjustment_id}/revert")
def _revert(world):
    return {"body": {}}


@page_param("proposal_id")
def _page_proposal_id(world):
    return world.proposal_a.pk


@page_param("adjustment_id")
def _page_adjustment_id(world):
    return world.adjustment_a.pk
