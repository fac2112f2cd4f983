"""`biaslab view`: a local, read-only web app over a warehouse (`app.create_app`; what it reads: `queries`)."""

from .app import create_app

__all__ = ["create_app"]
