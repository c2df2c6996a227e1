"""User-facing errors: bad input is not a bug (STYLE.md rule 10).

Library code raises these; only the command-line front ends turn them into one line on
stderr and exit status 2.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input from a user: a scenario, a command-line flag or a result file."""


class ScenarioError(UserError):
    """A scenario file that cannot be run: names the field path and the value."""


class NotModelledError(UserError):
    """A valid scenario feature that this backend does not model (yet)."""
