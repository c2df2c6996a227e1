"""The scenario language: schema, units, catalog, loading and sweep expansion.

`scenarios.load(path)` -> `Scenario` (frozen, resolved), shared by `sim` and `real`.
"""

from .errors import NotModelledError, ScenarioError, UserError
from .loader import Point, Scenario, load, loads
from .spec import ScenarioSpec

__all__ = [
    "NotModelledError",
    "Point",
    "Scenario",
    "ScenarioError",
    "ScenarioSpec",
    "UserError",
    "load",
    "loads",
]
