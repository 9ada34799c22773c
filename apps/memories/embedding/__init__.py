"""Embedding memories and queries: the providers (providers.py: local MiniLM, OpenAI, hashing),
the local model on ONNX Runtime (onnx_runtime.py), the precision stage's second model
(precision.py) and the text each memory and query is embedded as (contextual.py)."""
