"""Which configured sources have passed their privilege check in this process.

A source is used only once its database role has been checked to be able to only read
(`agent_core.data.privileges`) and, when the access policy governs it, the tables and columns
the policy names have been found in its catalog (`agent_core.governance.policy_catalog`). The
check runs at start-up (`verify_sources`); a source whose
database could not be reached then is *unavailable*, not used unchecked: a query on it is
refused with a clear message, and the check is tried again when the source is next used (at
most every ``RECHECK_AFTER_S``), so the source opens by itself once its database is back and the
check passes. A process that did not run the start-up check (a worker, `tool run`) checks each
source before its first query.

One registry per process (`SOURCE_CHECKS`): the start-up check, every `SourceAccess` and
``/readyz`` share it. At start-up `verify_sources` raises :class:`PrivilegedSourceError`
(naming the source, the privilege and how to create a read-only role) unless the source sets
``"allow_privileged": true``; an accepted privileged source is logged at WARNING on every start.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from agent_core.data.errors import DataError, DataSourceConfigError
from agent_core.data.source_config import DataSourceConfig

if TYPE_CHECKING:
    from agent_core.governance.policy import AccessPolicy, SourcePolicy

RECHECK_AFTER_S = 30.0
# A passed check is repeated after this long: a catalog that changed since (a protected table
# renamed) closes the source in every process, without telling the processes.
REVALIDATE_AFTER_S = 3600.0
UNREACHABLE = "its database could not be reached to check that the bot's role can only read it"
PRIVILEGED = "its database role can do more than read (see the service's start-up log)"


class PrivilegedSourceError(DataSourceConfigError):
    """One or more sources connect with a role that can do more than read.

    ``problems`` maps each refused source's name to what its role can do.
    """

    def __init__(self, message: str, problems: dict[str, list[str]]) -> None:
        super().__init__(message)
        self.problems = problems


class SourceUnavailable(DataError):
    """The source has not passed its privilege check (yet), so it is not used."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(
            f"The data source {name!r} is unavailable right now: {reason}. Try again in a few "
            "minutes; if it stays unavailable, an admin should check the database."
        )


class SourceChecks:
    """The privilege-check state of each source: passed, or unavailable with a reason."""

    def __init__(self, *, recheck_after_s: float = RECHECK_AFTER_S, clock: Callable[[], float] = time.monotonic) -> None:
        # By name and URL: a name configured anew (another database) is checked anew.
        self._passed: dict[_Key, float] = {}  # when it passed
        self._unavailable: dict[_Key, tuple[str, float]] = {}  # (reason, when checked)
        self._recheck_after_s = recheck_after_s
        self._clock = clock
        self._lock = threading.Lock()
        self._running: dict[_Key, asyncio.Task[None]] = {}  # background re-checks (`recheck_due`)

    def mark_passed(self, cfg: DataSourceConfig) -> None:
        with self._lock:
            self._passed[_key(cfg)] = self._clock()
            self._unavailable.pop(_key(cfg), None)

    def mark_unavailable(self, cfg: DataSourceConfig, reason: str) -> None:
        with self._lock:
            self._passed.pop(_key(cfg), None)
            self._unavailable[_key(cfg)] = (reason, self._clock())

    def status(self, configs: Iterable[DataSourceConfig]) -> dict[str, str]:
        """``available``, ``unavailable: <reason>`` or ``not checked yet``, per source name."""
        shown: dict[str, str] = {}
        for cfg in configs:
            if _key(cfg) in self._passed:
                shown[cfg.name] = "available"
            elif _key(cfg) in self._unavailable:
                shown[cfg.name] = f"unavailable: {self._unavailable[_key(cfg)][0]}"
            else:
                shown[cfg.name] = "not checked yet"
        return shown

    def due(self, cfg: DataSourceConfig) -> bool:
        """True when ``cfg`` has not passed and its last check is old enough to try again, or
        passed long enough ago to be checked again."""
        passed = self._passed.get(_key(cfg))
        if passed is not None:
            return self._clock() - passed >= REVALIDATE_AFTER_S
        checked = self._unavailable.get(_key(cfg))
        return checked is None or self._clock() - checked[1] >= self._recheck_after_s

    def check(self, cfg: DataSourceConfig, governed: SourcePolicy | None = None) -> None:
        """Run the checks of ``cfg`` now (blocking) and remember the verdict."""
        from agent_core.data.privileges import check_source_privileges

        try:
            problems = check_source_privileges(cfg)
            if problems and not cfg.allow_privileged:
                self.mark_unavailable(cfg, PRIVILEGED)
                return
            if governed is not None:
                from agent_core.governance.policy_catalog import check_policy_names

                errors = check_policy_names(cfg, governed).errors
                if errors:
                    reason = f"the access policy (BA_ACCESS_POLICY) names what it lacks: {'; '.join(errors)}"
                    self.mark_unavailable(cfg, reason)
                    return
        except DataError:
            self.mark_unavailable(cfg, UNREACHABLE)
            return
        self.mark_passed(cfg)

    async def ensure(self, cfg: DataSourceConfig, governed: SourcePolicy | None = None) -> None:
        """Return when ``cfg`` has passed its checks (checking again when due); raise
        `SourceUnavailable` otherwise. ``governed``: the policy of the source, if any."""
        if self.due(cfg):
            await asyncio.to_thread(self.check, cfg, governed)  # a second caller meanwhile checks too: harmless
        if _key(cfg) not in self._passed:
            reason = self._unavailable.get(_key(cfg), (UNREACHABLE, 0.0))[0]
            raise SourceUnavailable(cfg.name, reason)

    def recheck_due(self, configs: Iterable[DataSourceConfig], policy: AccessPolicy | None = None) -> None:
        """Start, in the background, the check of every source of ``configs`` that is due
        (for ``/readyz``, which reports the state without waiting for a database)."""
        for cfg in configs:
            if self.due(cfg) and _key(cfg) not in self._running:
                governed = policy.sources.get(cfg.name) if policy is not None else None
                self._running[_key(cfg)] = asyncio.create_task(self._check_in_thread(cfg, governed))

    async def _check_in_thread(self, cfg: DataSourceConfig, governed: SourcePolicy | None) -> None:
        try:
            await asyncio.to_thread(self.check, cfg, governed)
        finally:
            self._running.pop(_key(cfg), None)


_Key = tuple[str, str]


def _key(cfg: DataSourceConfig) -> _Key:
    return cfg.name, cfg.url


SOURCE_CHECKS = SourceChecks()


def verify_sources(
    configs: Mapping[str, DataSourceConfig] | Iterable[DataSourceConfig],
    logger: logging.Logger | None = None,
    *,
    strict: bool = False,
) -> dict[str, list[str]]:
    """Check every source's role at start-up; refuse privileged ones unless overridden.

    For each source whose role can do more than read (see :func:`agent_core.data.privileges.check_source_privileges`):
    with ``"allow_privileged": true`` a WARNING naming the privileges is logged (on every
    start); otherwise the source is refused. All sources are checked before raising
    :class:`PrivilegedSourceError`, whose message names each refused source, its privileges
    and how to create a read-only role.

    A source that cannot be reached is logged at WARNING and stays unavailable until its check
    passes (see the module docstring; the bot still starts when one database is down), or
    is refused when ``strict`` is true.

    Returns the problems of the sources that were accepted despite them (overridden ones).
    """
    from agent_core.data.privileges import check_source_privileges, read_only_role_instructions

    log = logger or logging.getLogger(__name__)
    sources = list(configs.values()) if isinstance(configs, Mapping) else list(configs)
    refused: dict[str, list[str]] = {}
    accepted: dict[str, list[str]] = {}
    for cfg in sources:
        try:
            problems = check_source_privileges(cfg)
        except DataError as error:
            SOURCE_CHECKS.mark_unavailable(cfg, UNREACHABLE)
            if strict:
                refused[cfg.name] = [f"its privileges could not be checked ({error})"]
            else:
                log.warning(
                    "data source %r: could not check its database privileges (%s); it stays "
                    "unavailable until the check passes (tried again when it is next used)",
                    cfg.name,
                    error,
                )
            continue
        if not problems or cfg.allow_privileged:
            SOURCE_CHECKS.mark_passed(cfg)
        if not problems:
            continue
        if cfg.allow_privileged:
            accepted[cfg.name] = problems
            log.warning(
                "data source %r connects as a role that can do more than read (%s); accepted "
                "because it sets allow_privileged. %s",
                cfg.name,
                "; ".join(problems),
                read_only_role_instructions(cfg),
            )
        else:
            refused[cfg.name] = problems
    if refused:
        by_name = {cfg.name: cfg for cfg in sources}
        paragraphs = [
            f"Data source {name!r} ({by_name[name].safe_url}) connects as a database role that "
            f"can do more than read: {'; '.join(problems)}. "
            f"{read_only_role_instructions(by_name[name])} To accept the risk instead, set "
            f'"allow_privileged": true on this source in BA_DATASOURCES (logged at WARNING on '
            f"every start)."
            for name, problems in refused.items()
        ]
        raise PrivilegedSourceError("\n".join(paragraphs), refused)
    return accepted
