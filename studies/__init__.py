"""The project's data, shipped with it as package data: the knob registry (``knobs.toml``), the
benchmark profiles (``profiles.toml``), the studies (``<name>.toml``), the stacks' manifests
(``manifests/``) and the data sets (``data/``). A package, so that an installed copy finds them
beside its code, as a checkout does; code names the folder through ``STUDIES_DIR`` only."""

from pathlib import Path

__all__ = ["STUDIES_DIR"]

STUDIES_DIR = Path(__file__).resolve().parent
