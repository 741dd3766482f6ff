"""The HTTP API (FastAPI on uvicorn) over a worker: app.py builds it, serve.py runs it."""
