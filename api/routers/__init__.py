"""One module per API area, each exposing `router` (an APIRouter) that api/app.py mounts under /v1."""
