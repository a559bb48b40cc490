"""The local explorer server (FastAPI + uvicorn)."""

from attnlab.serve.app import ModelTracer, ServeConfig, create_app, model_tracer, run

__all__ = ["ModelTracer", "ServeConfig", "create_app", "model_tracer", "run"]
