"""Values a workflow publishes, and the update requests it answers: the write that publishes
and the records readers get (internal; the records are re-exported where public).

:class:`PublishValue` rides in the owner's fenced commit with the journal position that
publishes (``ctx.publish``): the value row and that step commit together or not at all, so a
reader never sees a value the journal does not hold, and a crash before the commit shows
nothing. Each publication of a name increments its ``version``; values belong to the instance,
not to a run, so they are kept across continue-as-new and after the instance ends.

An update request is an event in the instance's inbox under :data:`UPDATE_PREFIX` + its name,
its event id :func:`update_event_id` of the caller's ``update_id``: the inbox keeps one event
per id in every run of the instance, which is what deduplicates an update at instance scope.
Its reply is published under :func:`reply_name`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledgerflow.model.codec import JSON
from ledgerflow.model.ids import InstanceId

# The inbox name prefix of an update request (a signal may not take it).
from ledgerflow.model.signal import UPDATE_PREFIX

# The journal name prefix of a publishing position.
PUBLISH_PREFIX = "publish:"
# The journal name of an update request taken under a wait (runtime/update_handlers.py): this
# prefix, then the request's event name (``update:{name}``).
TAKE_PREFIX = "take:"


def update_event_id(update_id: str) -> str:
    """The inbox event id of the update ``update_id`` (one per instance, every run)."""
    return UPDATE_PREFIX + update_id


def reply_name(update_id: str) -> str:
    """The name the reply to the update ``update_id`` is published under."""
    return UPDATE_PREFIX + update_id


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishValue:
    """Publish ``value`` (encoded) under ``name`` from journal position ``seq`` of run
    ``run``: the name's version goes up by one."""

    name: str
    value: str
    run: int
    seq: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Published:
    """The value last published under a name, with its version (1 for the first), the run
    and position that published it, and when (store time)."""

    instance_id: InstanceId
    name: str
    value_text: str
    version: int
    run: int
    seq: int
    published_at: float

    @property
    def value(self) -> Any:
        """The value, decoded."""
        return JSON.decode(self.value_text)


@dataclass(frozen=True, slots=True, kw_only=True)
class NotPublished:
    """No value was published under ``name`` (yet): not the same as a value of ``None``."""

    instance_id: InstanceId
    name: str
