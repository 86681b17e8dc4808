"""``verlog view``: one self-contained HTML page of a run (summary, learning curves, episodes turn by turn).

API::

    from verlog.viewer import build_view
    result = build_view("outputs/run", out="run.html", max_episodes=300)   # ViewResult(path, bytes, ...)

docs/viewer.md describes the page; :mod:`verlog.viewer.data` the folders it reads; :mod:`verlog.tapes.recorders` the
tapes.
"""

from verlog.viewer.build import DEFAULT_MAX_EPISODES, ViewResult, build_payload, build_view, render_html
from verlog.viewer.data import RunData, ViewError, load_run

__all__ = [
    "DEFAULT_MAX_EPISODES",
    "RunData",
    "ViewError",
    "ViewResult",
    "build_payload",
    "build_view",
    "load_run",
    "render_html",
]
