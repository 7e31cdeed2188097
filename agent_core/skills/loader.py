"""Loading skills from disk and serving them by progressive disclosure.

Level 1 -- :meth:`SkillCatalog.system_prompt_section`: name + description of every
model-invocable skill, for the cached system prompt.
Level 2 -- :meth:`SkillCatalog.activate`: the full instructions plus a list of level-3 files.
Level 3 -- :meth:`SkillCatalog.read_resource`: one reference/asset/script file, on demand.

Everything is read once by :func:`load_skills` (at startup). The catalog then serves from
memory: no disk I/O on the event loop, no files changing under a running conversation, and
level-3 reads can only return files that were enumerated at load time -- the path-safety check
is a dictionary lookup against that allowlist.

Invalid skills are skipped, logged with every problem found, and kept in
:attr:`SkillCatalog.errors` so ``ba-agent skills list`` can show them; one broken operator
skill never takes the others down.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from agent_core.skills.model import (
    SKILL_URI_SCHEME,
    ActivationPayload,
    Skill,
    SkillFrontmatter,
    SkillInvocationDenied,
    SkillIssue,
    SkillNotFound,
    SkillResource,
    SkillResourceInfo,
    SkillValidationError,
    skill_uri,
)

logger = logging.getLogger(__name__)

SKILL_FILE = "SKILL.md"
RESOURCE_DIRS = ("references", "assets", "scripts")
MAX_SKILL_FILE_BYTES = 100_000
MAX_BODY_WORDS = 5_000
MAX_BODY_BYTES = 50_000
MAX_RESOURCE_TEXT_BYTES = 256 * 1024  # larger resources are listed but not readable
MAX_RESOURCES = 200

_FRONTMATTER_END = re.compile(r"^---[ \t]*$", re.MULTILINE)


def bundled_skills_dir() -> Path:
    """The ``skills`` package's folder: the skills shipped with the product, found the same
    way from a checkout and from an installed wheel."""
    import skills

    return Path(skills.__file__).resolve().parent


# --------------------------------------------------------------------------------------------
# Parsing one skill
# --------------------------------------------------------------------------------------------


class _StrictSafeLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (PyYAML silently keeps the last one, which could
    hide e.g. a second, more permissive ``allowed-tools``)."""


def _construct_mapping(loader: _StrictSafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        try:
            duplicate = key in seen
        except TypeError:
            duplicate = False  # unhashable key: construct_mapping reports it below
        else:
            seen.add(key)
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
    return loader.construct_mapping(node)


_StrictSafeLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def _split_frontmatter(text: str) -> tuple[str, str] | SkillIssue:
    """(yaml text, body) or the issue explaining why there is no frontmatter block."""
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    if not text.startswith("---\n"):
        return SkillIssue(field="frontmatter", message="file must start with a '---' line")
    end = _FRONTMATTER_END.search(text, 4)
    if end is None:
        return SkillIssue(field="frontmatter", message="no closing '---' line")
    return text[4 : end.start()], text[end.end() :].strip("\n")


def _parse_yaml(source: str) -> dict[str, Any] | SkillIssue:
    try:
        data = yaml.load(source, Loader=_StrictSafeLoader)  # a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        # +2: the YAML block starts on the line after the opening '---' (1-based lines).
        where = f"line {mark.line + 2}, column {mark.column + 1}: " if mark else ""
        return SkillIssue(field="frontmatter", message=f"malformed YAML: {where}{problem}")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return SkillIssue(field="frontmatter", message="must be a YAML mapping of keys")
    return data


def _frontmatter_issues(error: ValidationError) -> list[SkillIssue]:
    issues = []
    for err in error.errors():
        field = ".".join(str(part) for part in err["loc"]) or "frontmatter"
        if err["type"] == "extra_forbidden":
            allowed = ", ".join(
                f.alias or name for name, f in SkillFrontmatter.model_fields.items()
            )
            message = f"unknown key (allowed keys: {allowed})"
        elif err["type"] == "missing":
            message = "is required"
        else:
            message = err["msg"].removeprefix("Value error, ")
        issues.append(SkillIssue(field=field, message=message))
    return issues


def _body_issues(body: str) -> list[SkillIssue]:
    if not body.strip():
        return [SkillIssue(field="body", message="instructions are empty")]
    issues = []
    words = len(body.split())
    if words > MAX_BODY_WORDS:
        issues.append(
            SkillIssue(
                field="body",
                message=f"{words} words; the limit is {MAX_BODY_WORDS} "
                "(move detail into references/)",
            )
        )
    size = len(body.encode())
    if size > MAX_BODY_BYTES:
        issues.append(
            SkillIssue(field="body", message=f"{size} bytes; the limit is {MAX_BODY_BYTES}")
        )
    return issues


def _iter_resource_files(skill_dir: Path) -> Iterator[tuple[str, Path]]:
    """(relpath, path) of regular files under the resource folders, no symlinks.

    Symlinks are skipped (and logged) rather than followed: a skill copied from elsewhere must
    not be able to expose files outside its folder.
    """
    for top in RESOURCE_DIRS:
        base = skill_dir / top
        if base.is_symlink() or not base.is_dir():
            if base.is_symlink():
                logger.warning("skill %s: skipping symlinked folder %s", skill_dir.name, top)
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for filename in filenames:
                path = Path(dirpath, filename)
                if filename.startswith("."):
                    continue
                relpath = path.relative_to(skill_dir).as_posix()
                if path.is_symlink() or not path.is_file():
                    logger.warning(
                        "skill %s: skipping non-regular file %s", skill_dir.name, relpath
                    )
                    continue
                yield relpath, path


def _load_resources(skill_dir: Path) -> tuple[dict[str, SkillResource], list[SkillIssue]]:
    resources: dict[str, SkillResource] = {}
    issues: list[SkillIssue] = []
    for relpath, path in sorted(_iter_resource_files(skill_dir)):
        if len(resources) >= MAX_RESOURCES:
            issues.append(SkillIssue(field="resources", message=f"more than {MAX_RESOURCES} files"))
            break
        size = path.stat().st_size
        text: str | None = None
        if size <= MAX_RESOURCE_TEXT_BYTES:
            raw = path.read_bytes()
            try:
                text = None if b"\x00" in raw else raw.decode("utf-8")
            except UnicodeDecodeError:
                text = None
        resources[relpath] = SkillResource(relpath=relpath, size=size, text=text)
    return resources, issues


def parse_skill(skill_dir: Path) -> Skill:
    """Load and validate one skill folder.

    Raises SkillValidationError listing every problem, each naming the field at fault.
    """
    skill_file = skill_dir / SKILL_FILE
    if not skill_file.is_file():
        raise SkillValidationError(
            skill_dir, [SkillIssue(field="file", message=f"no {SKILL_FILE} in the folder")]
        )
    size = skill_file.stat().st_size
    if size > MAX_SKILL_FILE_BYTES:
        raise SkillValidationError(
            skill_file,
            [
                SkillIssue(
                    field="file", message=f"{size} bytes; the limit is {MAX_SKILL_FILE_BYTES}"
                )
            ],
        )
    try:
        text = skill_file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SkillValidationError(
            skill_file, [SkillIssue(field="file", message="not valid UTF-8")]
        ) from None

    split = _split_frontmatter(text)
    if isinstance(split, SkillIssue):
        raise SkillValidationError(skill_file, [split])
    yaml_text, body = split
    data = _parse_yaml(yaml_text)
    if isinstance(data, SkillIssue):
        raise SkillValidationError(skill_file, [data])

    issues: list[SkillIssue] = []
    frontmatter: SkillFrontmatter | None = None
    try:
        frontmatter = SkillFrontmatter.model_validate(data)
    except ValidationError as e:
        issues += _frontmatter_issues(e)
    name = data.get("name")
    if isinstance(name, str) and name != skill_dir.name:
        issues.append(
            SkillIssue(
                field="name", message=f"{name!r} must match the folder name {skill_dir.name!r}"
            )
        )
    issues += _body_issues(body)
    resources, resource_issues = _load_resources(skill_dir)
    issues += resource_issues
    if issues or frontmatter is None:
        raise SkillValidationError(skill_file, issues)
    return Skill(
        frontmatter=frontmatter, instructions=body, directory=skill_dir, resources=resources
    )


# --------------------------------------------------------------------------------------------
# Catalog
# --------------------------------------------------------------------------------------------


def parse_skill_uri(uri: str) -> tuple[str, str]:
    """Split ``skill://<name>/<relpath>`` into (name, relpath). Raises SkillNotFound."""
    if not uri.startswith(SKILL_URI_SCHEME):
        raise SkillNotFound(f"not a skill file path (expected {SKILL_URI_SCHEME}<skill>/<file>)")
    name, _, relpath = uri.removeprefix(SKILL_URI_SCHEME).partition("/")
    if not name or not relpath:
        raise SkillNotFound(f"not a skill file path (expected {SKILL_URI_SCHEME}<skill>/<file>)")
    return name, relpath


class SkillCatalog:
    """All loaded skills, by name, plus the load errors. Immutable after construction."""

    def __init__(
        self, skills: Mapping[str, Skill], errors: Sequence[SkillValidationError] = ()
    ) -> None:
        self._skills = dict(sorted(skills.items()))
        self.errors: tuple[SkillValidationError, ...] = tuple(errors)
        # Built once: the section is part of a cached prompt prefix and must never vary.
        self._prompt_section = self._build_prompt_section()

    def __contains__(self, name: object) -> bool:
        return name in self._skills

    def __iter__(self) -> Iterator[Skill]:
        return iter(self._skills.values())

    def __len__(self) -> int:
        return len(self._skills)

    def names(self) -> list[str]:
        """Names of all loaded skills, sorted."""
        return list(self._skills)

    def get(self, name: str) -> Skill:
        """The skill called `name`; SkillNotFound (listing available skills) otherwise."""
        try:
            return self._skills[name]
        except KeyError:
            available = (
                ", ".join(s.name for s in self._skills.values() if s.model_invocable) or "none"
            )
            raise SkillNotFound(f"no skill named {name!r} (available: {available})") from None

    # ---- level 1

    def _build_prompt_section(self) -> str:
        listed = [s for s in self._skills.values() if s.model_invocable]
        if not listed:
            return ""
        lines = [
            "## Skills",
            "Skills are packaged instructions for specific kinds of analysis. When a request "
            "matches a skill's description, call `activate_skill` with its name before you "
            "start; its full instructions are then loaded into the conversation.",
            "",
        ]
        lines += [f"- {s.name}: {' '.join(s.description.split())}" for s in listed]
        return "\n".join(lines) + "\n"

    def system_prompt_section(self) -> str:
        """Level 1: name + description of each model-invocable skill, sorted by name.

        Byte-identical on every call (it sits in the cached prompt prefix); empty when there is
        nothing to list.
        """
        return self._prompt_section

    # ---- level 2

    def activate(self, name: str, *, by_model: bool = True) -> ActivationPayload:
        """Level 2: full instructions plus the level-3 file list.

        Raises SkillNotFound, or SkillInvocationDenied when the model asks for a skill marked
        ``disable-model-invocation`` (users may still activate it: ``by_model=False``). This does
        not track activation state; see SkillActivationStack for cycles, depth and injection.
        """
        skill = self.get(name)
        if by_model and not skill.model_invocable:
            raise SkillInvocationDenied(
                f"skill {name!r} can only be activated by a user, not by the assistant"
            )
        return ActivationPayload(
            name=skill.name,
            description=skill.description,
            instructions=skill.instructions,
            resources=[
                SkillResourceInfo(
                    uri=skill_uri(skill.name, r.relpath), size=r.size, readable=r.readable
                )
                for r in skill.resources.values()
            ],
            allowed_tools=skill.allowed_tools,
            model=skill.model,
        )

    # ---- level 3

    def read_resource(self, name: str, relpath: str) -> str:
        """Level 3: the text of one file of skill `name`, e.g. ``references/methods.md``.

        Only files enumerated at load time can be returned, so no path can escape the skill
        folder; a leading ``./`` or ``/`` is tolerated. Raises SkillNotFound otherwise.
        """
        skill = self.get(name)
        key = relpath.strip().removeprefix("./").lstrip("/")
        resource = skill.resources.get(key)
        if resource is None:
            listing = ", ".join(skill.resources) or "none"
            raise SkillNotFound(f"skill {name!r} has no file {relpath[:200]!r} (files: {listing})")
        if resource.text is None:
            raise SkillNotFound(
                f"{skill_uri(name, key)} is binary or larger than "
                f"{MAX_RESOURCE_TEXT_BYTES // 1024} KB and cannot be read as text"
            )
        return resource.text

    def read_uri(self, uri: str) -> str:
        """Level 3 by virtual path: ``skill://<name>/<relpath>``."""
        name, relpath = parse_skill_uri(uri)
        return self.read_resource(name, relpath)


# --------------------------------------------------------------------------------------------
# Loading several folders
# --------------------------------------------------------------------------------------------


def _skill_dirs(root: Path) -> Iterator[Path]:
    for entry in sorted(root.iterdir()):
        # Hidden folders and caches are not skills; loose files (README.md) are ignored.
        if entry.is_dir() and not entry.name.startswith((".", "_")):
            yield entry


def load_skills(dirs: Sequence[Path]) -> SkillCatalog:
    """Load every skill under each folder of `dirs`, in order.

    A later folder overrides an earlier one by skill name (bundled skills first, then the
    operator's ``BA_SKILLS_DIR``). Invalid skills are skipped and reported in
    ``catalog.errors``; an invalid override leaves the earlier valid skill in place. A
    configured folder that does not exist is reported too.
    """
    skills: dict[str, Skill] = {}
    errors: list[SkillValidationError] = []
    for root in dirs:
        root = Path(root)
        if not root.is_dir():
            errors.append(
                SkillValidationError(
                    root, [SkillIssue(field="folder", message="skills folder does not exist")]
                )
            )
            continue
        for skill_dir in _skill_dirs(root):
            try:
                skill = parse_skill(skill_dir)
            except SkillValidationError as e:
                errors.append(e)
                continue
            previous = skills.get(skill.name)
            if previous is not None:
                logger.info(
                    "skill %s from %s overrides %s", skill.name, skill_dir, previous.directory
                )
            skills[skill.name] = skill
    for error in errors:
        logger.error("%s", error.describe())
    return SkillCatalog(skills, errors)


def load_skill_catalog(skills_dir: Path | None) -> SkillCatalog:
    """Bundled skills, then the operator's directory (``BA_SKILLS_DIR``; same name overrides).
    Light on purpose: `ba-agent skills list` loads this without the model SDK."""
    catalog = load_skills([bundled_skills_dir(), *([skills_dir] if skills_dir else [])])
    for error in catalog.errors:
        logger.error("skill not loaded: %s", error)
    return catalog
