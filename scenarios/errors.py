"""User-facing errors: bad input is not a bug (STYLE.md rule 10).

Library code raises these; only the command-line front ends turn them into one line on
stderr and exit status 2.
"""

from __future__ import annotations

import re


class UserError(Exception):
    """Bad input from a user: a scenario, a command-line flag or a result file.

    Its message is one line, whatever the input it quotes holds: a line break in a key,
    a path or a value shows escaped (`\\n`)."""

    def __str__(self) -> str:
        return _BREAKS.sub(
            lambda found: found.group().encode("unicode_escape").decode(), super().__str__()
        )


#: what str.splitlines breaks a line at
_BREAKS = re.compile("[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


class ScenarioError(UserError):
    """A scenario file that cannot be run: names the field path and the value."""


class NotModelledError(UserError):
    """A valid scenario feature that this backend does not model (yet)."""
