"""How the API pages show rlbook's docstrings: as reStructuredText where they parse, verbatim where not.

rlbook's docstrings are written to be read as plain text (``help()``, an editor): ``|A|`` for an
absolute value, formulas aligned in columns, continuation lines indented under a bullet. Read as
reStructuredText, ``|A|`` is a substitution and an indented line a block quote, so Sphinx would
warn and drop or garble text. The book therefore (1) escapes ``|`` outside inline literals, and
(2) parses each docstring on its own with docutils; one that still does not parse cleanly is shown
as a literal block, exactly as written, and its name is listed in ``docstrings-verbatim.txt`` in the
site's folder (the docstring's owner can then make it valid reStructuredText).
"""

from __future__ import annotations

import io
import re

from docutils.core import publish_doctree

__all__ = ["escape_pipes", "rst_problems", "as_shown"]

INLINE_LITERAL = re.compile(r"(``.+?``)")


def escape_pipes(line: str) -> str:
    """``line`` with every ``|`` outside ````inline literals```` escaped, so it is text, not a substitution."""
    return "".join(part if part.startswith("``") else part.replace("|", r"\|")
                   for part in INLINE_LITERAL.split(line))


def rst_problems(text: str, **settings) -> str:
    """What docutils reports when it parses ``text`` as reStructuredText (warnings and worse); '' if nothing.

    ``settings`` are extra docutils settings (inside a Sphinx build: ``env=app.env``, which Sphinx's
    role and directive look-ups need).
    """
    stream = io.StringIO()
    publish_doctree(text, settings_overrides={"report_level": 2, "halt_level": 5, "warning_stream": stream, **settings})
    return stream.getvalue()


def as_shown(lines: list[str], **settings) -> tuple[list[str], bool]:
    """The docstring ``lines`` as the book renders them, and whether they parsed as reStructuredText.

    Parsed: pipes escaped. Not parsed: the original lines as one literal block. ``settings``: as in
    ``rst_problems``.
    """
    escaped = [escape_pipes(line) for line in lines]
    if not rst_problems("\n".join(escaped), **settings):
        return escaped, True
    return ["::", ""] + [f"    {line}" if line else "" for line in lines] + [""], False
