"""Static images (PNG, SVG) of plotly figures through kaleido and the system's Chromium.

kaleido 1.x drives a Chrome it would otherwise download; here it drives Debian's `chromium`
(the README installs it), found as choreographer finds browsers: ``BROWSER_PATH`` first, then
the usual names on ``PATH``. Nothing is fetched: plotly.js comes from the plotly package and
MathJax (a CDN script by default) is switched off, so rendering works with no network.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import plotly.graph_objects as go

from errors import BrowserNotFoundError, ImageRenderError

__all__ = ["find_browser", "write_images"]

_BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
_INSTALL_HINT = "install Debian's chromium (apt-get install -y chromium) or set BROWSER_PATH"


def find_browser() -> Path:
    explicit = os.environ.get("BROWSER_PATH")
    if explicit:
        path = Path(explicit)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BrowserNotFoundError(f"BROWSER_PATH={explicit!r} is not an executable file; {_INSTALL_HINT}")
        return path
    for name in _BROWSER_NAMES:
        found = shutil.which(name)
        if found:
            return Path(found)
    raise BrowserNotFoundError(f"no Chromium found on PATH (looked for {', '.join(_BROWSER_NAMES)}); {_INSTALL_HINT}")


def write_images(fig: go.Figure, paths: list[Path], *, width: int = 1200, height: int = 700) -> list[Path]:
    """Render ``fig`` once per path, the format taken from each suffix (.png, .svg, .pdf)."""
    import kaleido  # lazily: it imports choreographer and starts nothing until called
    from kaleido import errors

    browser = find_browser()
    fig_dict = fig.to_dict()
    specs = [
        {
            "fig": fig_dict,
            "path": str(path),
            "opts": {"format": path.suffix.lstrip("."), "width": width, "height": height},
        }
        for path in paths
    ]
    # One browser for all images; mathjax=False keeps kaleido off its CDN default.
    try:
        kaleido.write_fig_from_object_sync(specs, kopts={"mathjax": False, "path": str(browser)})
    except (
        errors.BrowserClosedError,
        errors.BrowserFailedError,
        errors.KaleidoError,
        errors.JavascriptError,
        TimeoutError,
    ) as exc:
        names = ", ".join(p.name for p in paths)
        raise ImageRenderError(f"{browser} failed to render {names}: {type(exc).__name__}: {exc}") from exc
    return paths
