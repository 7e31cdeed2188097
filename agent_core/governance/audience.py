"""Who an answer is for, and what of a protected table those readers may see.

The audience decides, not only the asker: in a DM only the asker reads the answer, so their
groups apply; in a channel or group chat everyone there reads it, so the channel's configured
group applies, and without one only what the ``default`` group may see. A scheduled run (a
report, a monitor) answers nobody who is there to ask: it runs with its creator's access *and*
is read where it posts, so both apply at once (:class:`JointAudience`: a row must pass both, a
column be open to both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from agent_core.governance.policy import DEFAULT_GROUP, AccessPolicy, SourcePolicy, TablePolicy

if TYPE_CHECKING:
    from agent_core.run_context import RunDeps


class Identity(BaseModel):
    """The person asking and the place they ask in, as the chat platform names them."""

    model_config = ConfigDict(frozen=True)

    platform: str  # slack, feishu …
    user: str  # the platform's user id
    channel: str = ""  # the platform's channel / chat id ("" outside any channel)
    is_dm: bool = False
    # A scheduled run (a report, a monitor): ``user`` is its creator, ``channel`` where it posts.
    scheduled: bool = False

    @classmethod
    def of(cls, deps: RunDeps) -> Identity:
        """The identity a run acts for; without a chat origin the platform is unknown, so only
        the ``default`` group can apply (and nothing is opened by mistake)."""
        platform = deps.chat.platform if deps.chat is not None else ""
        return cls(
            platform=platform,
            user=deps.user,
            channel=deps.channel,
            is_dm=deps.is_dm,
            scheduled=deps.scheduled_run is not None,
        )


@dataclass(frozen=True)
class GroupAudience:
    """The groups whose rules apply to an answer, and why (for the note to the asker)."""

    groups: frozenset[str]
    basis: str  # "your access" / "this channel's access"


@dataclass(frozen=True)
class JointAudience:
    """Readers bound by two audiences at once: what both may see, nothing either may not."""

    creator: GroupAudience  # whose access the run acts with
    place: GroupAudience  # the access of where the answer is read

    @property
    def basis(self) -> str:
        return f"the creator's access and {self.place.basis}"


Audience = GroupAudience | JointAudience


@dataclass(frozen=True)
class TableView:
    """What an audience may read of one protected table."""

    table: str  # the table as the policy names it
    # The row filters that apply, any of which lets a row through: each one group's condition
    # (or, for a joint audience, both sides' conditions in one); () means no rows; None all rows.
    row_filters: tuple[str, ...] | None
    filtered_for: tuple[str, ...]  # the groups whose filters let rows through, for the note
    hidden_columns: frozenset[str]  # case-folded names the audience may not read

    @property
    def restricts(self) -> bool:
        return self.row_filters is not None or bool(self.hidden_columns)


def audience_of(policy: AccessPolicy, identity: Identity) -> Audience:
    """The audience that decides what an answer to ``identity`` may contain."""
    platform = identity.platform.lower()
    member = f"{platform}:{identity.user}"
    asker_groups = {name for name, members in policy.groups.items() if member in _members(members)}
    asker = GroupAudience(frozenset(asker_groups | {DEFAULT_GROUP}), "your access")
    if identity.is_dm:
        return asker
    configured = policy.channels.get(f"{platform}:{identity.channel}")
    groups = {DEFAULT_GROUP} | ({configured} if configured else set())
    place = GroupAudience(frozenset(groups), "this channel's access (everyone here reads the answer)")
    return JointAudience(asker, place) if identity.scheduled else place


def _members(members: list[str]) -> set[str]:
    """Members with the platform part lower-cased (ids themselves are case-sensitive)."""
    return {f"{platform.lower()}:{rest}" for platform, _, rest in (m.partition(":") for m in members)}


def source_open(source: SourcePolicy, audience: Audience) -> bool:
    """True if the audience may use the source at all."""
    if isinstance(audience, JointAudience):
        return source_open(source, audience.creator) and source_open(source, audience.place)
    return bool(audience.groups & set(source.groups))


def table_view(table_name: str, table: TablePolicy, audience: Audience) -> TableView:
    """What ``audience`` may read of ``table``: the union of a group audience's rows and
    columns; for a joint audience, the intersection of what each of its two may read."""
    if isinstance(audience, JointAudience):
        return intersect_views(
            table_view(table_name, table, audience.creator), table_view(table_name, table, audience.place)
        )
    row_filters: tuple[str, ...] | None = None
    filtered_for: tuple[str, ...] = ()
    if table.row_filters is not None:
        applying = {g: f for g, f in table.row_filters.items() if g in audience.groups}
        if any(_is_true(f) for f in applying.values()):
            row_filters = None  # one group sees every row: so does the union
        else:
            row_filters = tuple(f for _, f in sorted(applying.items()) if not _is_false(f))
            filtered_for = tuple(sorted(g for g, f in applying.items() if not _is_false(f)))
    granted = {
        column.casefold()
        for group, columns in table.column_grants.items()
        if group in audience.groups
        for column in columns
    }
    hidden = frozenset(c.casefold() for c in table.hidden_columns) - granted
    return TableView(table_name, row_filters, filtered_for, hidden)


def intersect_views(first: TableView, second: TableView) -> TableView:
    """The rows both views let through and the columns neither hides."""
    hidden = first.hidden_columns | second.hidden_columns
    if first.row_filters is None or second.row_filters is None:
        rows = second if first.row_filters is None else first
        return TableView(first.table, rows.row_filters, rows.filtered_for, hidden)
    if not first.row_filters or not second.row_filters:
        return TableView(first.table, (), (), hidden)
    # Each side is the OR of its groups' filters; a row must pass both sides. The filters were
    # checked one by one when the policy loaded, and AND / OR of checked conditions is allowed.
    both = f"({_any_of(first.row_filters)}) AND ({_any_of(second.row_filters)})"
    groups = f"both {', '.join(first.filtered_for)} and {', '.join(second.filtered_for)}"
    return TableView(first.table, (both,), (groups,), hidden)


def _any_of(conditions: tuple[str, ...]) -> str:
    return " OR ".join(f"({condition})" for condition in conditions)


def _is_true(condition: str) -> bool:
    return condition.strip().strip("()").strip().lower() == "true"


def _is_false(condition: str) -> bool:
    return condition.strip().strip("()").strip().lower() == "false"


def access_note(views: list[TableView], audience: Audience) -> str | None:
    """What the asker should be told when the policy changed the answer, or None."""
    parts = []
    for view in views:
        if view.row_filters is not None:
            if view.filtered_for:
                groups = ", ".join(view.filtered_for)
                parts.append(f"showing rows of {view.table} allowed for {groups} only")
            else:
                parts.append(f"no rows of {view.table} are open here")
        if view.hidden_columns:
            columns = ", ".join(sorted(view.hidden_columns))
            parts.append(f"{columns} of {view.table} hidden")
    if not parts:
        return None
    return f"Access policy: {'; '.join(parts)} — per {audience.basis}."
