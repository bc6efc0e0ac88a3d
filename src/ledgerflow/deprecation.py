"""Public names that were renamed, kept working for one minor version (internal).

A renamed public name breaks every caller at once unless the old one keeps working for a
while and says what to use instead. Each alias calls :func:`renamed`, which warns with a
:class:`DeprecationWarning` at the caller's line, naming the new name and the release that
removes the old one; ``CHANGELOG.md`` lists every alias under "Deprecated".

Example::

    @property
    def events(self) -> list[TimelineEntry]:
        renamed("InstanceDetail.events", "InstanceDetail.timeline")
        return self.timeline
"""

from __future__ import annotations

import warnings

# The release that removes the aliases deprecated in this one.
REMOVED_IN = "0.3.0"


def renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is called ``new`` now (``stacklevel`` 3: the line that used the
    alias, from inside the alias's own function)."""
    warnings.warn(
        f"{old} is called {new} now; {old} is removed in {REMOVED_IN}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
