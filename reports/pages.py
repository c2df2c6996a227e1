"""The pages people read, report.html and plan.html, from the templates in
`reports/templates/` (Jinja2, every value escaped) with the one stylesheet both share.

A page is one self-contained file: its stylesheet inline, its plots embedded as PNG data
URIs, a script only where a table sorts (the plan's), nothing fetched, so it opens offline
and can be mailed as it is.
"""

from __future__ import annotations

import base64
import functools
import re
from typing import Any

import jinja2
from markupsafe import Markup, escape

from results.files import generator_tag


@functools.cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("reports", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        extensions=["jinja2.ext.do"],
    )
    env.globals["generator_tag"] = lambda command: Markup(generator_tag(str(escape(command))))
    return env


def render(template: str, **context: Any) -> str:
    """The page `template` makes of `context` (`written_by`: the command in its generator
    tag; `title`; `sortable`: whether it carries the script that sorts its tables)."""
    context.setdefault("sortable", False)
    return environment().get_template(template).render(**context)


def anchor(key: str) -> str:
    """An HTML id from a point id (which may hold '=', ',' and '.')."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", key)


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")
