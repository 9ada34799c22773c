"""Models of this app."""

from apps.insights.history import HealthSnapshot, RetrievalSample, SynthesisOptOut, WeeklySynthesis  # noqa: F401
