"""The local explorer server (FastAPI + uvicorn)."""

from attnlab.serve.app import ServeConfig, create_app, model_tracer, run

__all__ = ["ServeConfig", "create_app", "model_tracer", "run"]
