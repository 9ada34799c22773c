"""The device client: a libSQL replica of a project's memories that works offline and syncs
with the service (`/api/v1/sync/pull` and `/push`). It does not import Django."""
