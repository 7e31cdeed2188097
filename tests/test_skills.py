"""Skills: validation, overrides, progressive disclosure, activation stack, bundled skills."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent_core.skills.activation import SkillActivationStack
from agent_core.skills.loader import SkillCatalog, bundled_skills_dir, load_skills, parse_skill
from agent_core.skills.model import (
    SkillCycleError,
    SkillDepthError,
    SkillInvocationDenied,
    SkillNotFound,
    SkillStackError,
    SkillValidationError,
)

BODY = "# Steps\n\nDo the analysis carefully.\n"


def write_skill(
    root: Path,
    folder: str,
    frontmatter: dict[str, Any] | str | None = None,
    body: str = BODY,
    files: dict[str, str | bytes] | None = None,
) -> Path:
    """Create skills/<folder>/SKILL.md (+ resource files); frontmatter defaults to valid."""
    skill_dir = root / folder
    skill_dir.mkdir(parents=True, exist_ok=True)
    if frontmatter is None:
        frontmatter = {"name": folder, "description": f"The {folder} skill."}
    header = frontmatter if isinstance(frontmatter, str) else yaml.safe_dump(frontmatter)
    (skill_dir / "SKILL.md").write_text(f"---\n{header}---\n{body}", encoding="utf-8")
    for rel, content in (files or {}).items():
        path = skill_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return skill_dir


def fm(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "description": f"Does {name}.", **extra}


def catalog_of(tmp_path: Path, **skills: dict[str, Any]) -> SkillCatalog:
    """A catalog with one skill per keyword: folder name -> extra frontmatter."""
    root = tmp_path / "cat"
    for folder, extra in skills.items():
        write_skill(root, folder, fm(folder, **extra))
    catalog = load_skills([root])
    assert not catalog.errors, [str(e) for e in catalog.errors]
    return catalog


def validation_error(skill_dir: Path) -> SkillValidationError:
    with pytest.raises(SkillValidationError) as exc:
        parse_skill(skill_dir)
    return exc.value


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("frontmatter", "field", "fragment"),
    [
        ({"description": "x"}, "name", "required"),
        ({"name": "good"}, "description", "required"),
        ({"name": "other", "description": "x"}, "name", "folder name"),
        ({"name": "Good", "description": "x"}, "name", "lowercase"),
        ({"name": "good", "description": "   "}, "description", "empty"),
        ({"name": "good", "description": "x" * 1025}, "description", "1024"),
        ({"name": "good", "description": "x", "allowed_tools": ["a"]}, "allowed_tools", "unknown"),
        ({"name": "good", "description": "x", "max-depth": 0}, "max-depth", "greater than"),
        ({"name": "good", "description": "x", "max-depth": 11}, "max-depth", "less than"),
        ({"name": "good", "description": "x", "max-depth": "2"}, "max-depth", "integer"),
        ({"name": "good", "description": "x", "allowed-tools": [1]}, "allowed-tools", "string"),
        (
            {"name": "good", "description": "x", "allowed-tools": ["rm -rf"]},
            "allowed-tools",
            "invalid tool",
        ),
        (
            {"name": "good", "description": "x", "disable-model-invocation": "yes"},
            "disable-model-invocation",
            "boolean",
        ),
        ({"name": "good", "description": "x", "metadata": ["a"]}, "metadata", "dictionary"),
        ({"name": "good", "description": "x", "model": ""}, "model", "at least 1"),
    ],
)
def test_frontmatter_rules_name_file_and_field(
    tmp_path: Path, frontmatter: dict[str, Any], field: str, fragment: str
) -> None:
    skill_dir = write_skill(tmp_path, "good", frontmatter)
    error = validation_error(skill_dir)
    assert str(skill_dir / "SKILL.md") in str(error)
    assert any(i.field.split(".")[0] == field and fragment in i.message for i in error.issues), (
        error.issues
    )


@pytest.mark.parametrize("name", ["-lead", "trail-", "dou--ble", "under_score", "a" * 65, "sp ace"])
def test_name_pattern(tmp_path: Path, name: str) -> None:
    skill_dir = tmp_path / "folder"
    skill_dir.mkdir()
    (skill_dir / "SKILL.md").write_text(f"---\nname: '{name}'\ndescription: x\n---\nbody\n")
    assert any(i.field == "name" for i in validation_error(skill_dir).issues)


def test_all_problems_are_reported_together(tmp_path: Path) -> None:
    skill_dir = write_skill(tmp_path, "multi", {"name": "Bad_Name", "color": "red"}, body="")
    fields = {i.field for i in validation_error(skill_dir).issues}
    assert {"name", "description", "color", "body"} <= fields


def test_malformed_yaml_reports_path_and_line(tmp_path: Path) -> None:
    skill_dir = write_skill(tmp_path, "broken", "name: broken\ndescription: [unclosed\n")
    error = validation_error(skill_dir)
    assert str(skill_dir / "SKILL.md") in str(error)
    [issue] = error.issues
    assert issue.field == "frontmatter" and "malformed YAML" in issue.message
    assert re.search(r"line \d+", issue.message)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("no frontmatter at all\n", "must start"),
        ("---\nname: x\ndescription: y\n", "closing"),
        ("---\n- a\n- b\n---\nbody\n", "mapping"),
        ("---\nname: dup\nname: dup\ndescription: y\n---\nbody\n", "duplicate key"),
    ],
)
def test_frontmatter_block_errors(tmp_path: Path, text: str, fragment: str) -> None:
    skill_dir = tmp_path / "dup"
    skill_dir.mkdir()
    (skill_dir / "SKILL.md").write_text(text)
    error = validation_error(skill_dir)
    assert any(i.field == "frontmatter" and fragment in i.message for i in error.issues)


def test_body_limits(tmp_path: Path) -> None:
    empty = validation_error(write_skill(tmp_path, "empty", body="\n\n"))
    assert [i.field for i in empty.issues] == ["body"]
    wordy = validation_error(write_skill(tmp_path, "wordy", body="word " * 5001))
    assert any(i.field == "body" and "5000" in i.message for i in wordy.issues)
    heavy = validation_error(write_skill(tmp_path, "heavy", body="x" * 60_000))
    assert any(i.field == "body" and "bytes" in i.message for i in heavy.issues)


def test_missing_skill_file(tmp_path: Path) -> None:
    (tmp_path / "empty-folder").mkdir()
    error = validation_error(tmp_path / "empty-folder")
    assert error.issues[0].field == "file" and error.folder_name == "empty-folder"


def test_optional_keys_are_parsed(tmp_path: Path) -> None:
    skill = parse_skill(
        write_skill(
            tmp_path,
            "full",
            fm(
                "full",
                **{
                    "allowed-tools": "sql_query, make_chart sql_query",
                    "model": "claude-sonnet",
                    "max-depth": 2,
                    "disable-model-invocation": True,
                    "metadata": {"version": "1.0"},
                    "license": "MIT",
                },
            ),
        )
    )
    assert skill.allowed_tools == ("sql_query", "make_chart")
    assert skill.model == "claude-sonnet" and skill.max_depth == 2
    assert not skill.model_invocable and skill.frontmatter.metadata == {"version": "1.0"}


# ----------------------------------------------------------------------------- loading


def test_invalid_skill_is_skipped_and_reported(tmp_path: Path) -> None:
    write_skill(tmp_path, "good")
    write_skill(tmp_path, "bad", {"name": "bad"})
    (tmp_path / "README.md").write_text("not a skill")
    (tmp_path / ".hidden").mkdir()
    catalog = load_skills([tmp_path])
    assert catalog.names() == ["good"]
    [error] = catalog.errors
    assert error.folder_name == "bad" and "description" in str(error)


def test_later_dir_overrides_by_name(tmp_path: Path) -> None:
    bundled, operator = tmp_path / "bundled", tmp_path / "operator"
    write_skill(bundled, "alpha", fm("alpha"), body="bundled alpha\n")
    write_skill(bundled, "beta", fm("beta"), body="bundled beta\n")
    write_skill(operator, "alpha", fm("alpha"), body="operator alpha\n")
    write_skill(operator, "beta", {"name": "beta"}, body="broken override\n")
    catalog = load_skills([bundled, operator])
    assert catalog.get("alpha").instructions == "operator alpha"
    assert catalog.get("alpha").directory == operator / "alpha"
    # An invalid override keeps the earlier valid skill and reports the problem.
    assert catalog.get("beta").instructions == "bundled beta"
    assert [e.folder_name for e in catalog.errors] == ["beta"]


def test_missing_skills_dir_is_reported(tmp_path: Path) -> None:
    catalog = load_skills([tmp_path / "nope"])
    assert len(catalog) == 0 and catalog.errors[0].issues[0].field == "folder"


# ----------------------------------------------------------------------------- disclosure


def test_level1_section_is_stable_sorted_and_hides_disabled(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    write_skill(root, "zeta", fm("zeta", description="Last\n  one,\n  folded."))
    write_skill(root, "alpha", fm("alpha"))
    write_skill(root, "hidden", fm("hidden", **{"disable-model-invocation": True}))
    first = load_skills([root])
    text = first.system_prompt_section()
    assert text == first.system_prompt_section() == load_skills([root]).system_prompt_section()
    assert text.index("- alpha:") < text.index("- zeta: Last one, folded.")
    assert "hidden" not in text and "activate_skill" in text
    assert SkillCatalog({}).system_prompt_section() == ""


def test_level2_and_level3_disclosure(tmp_path: Path) -> None:
    write_skill(
        tmp_path,
        "kpi",
        fm("kpi", **{"allowed-tools": ["sql_query"], "model": "m1"}),
        files={
            "references/metrics.md": "GMV = sum of order value\n",
            "references/deep/notes.md": "notes\n",
            "assets/logo.png": b"\x89PNG\x00\x00",
            "scripts/check.py": "print('ok')\n",
            "other/ignored.md": "not a resource folder\n",
        },
    )
    catalog = load_skills([tmp_path])
    payload = catalog.activate("kpi")
    assert [r.uri for r in payload.resources] == [
        "skill://kpi/assets/logo.png",
        "skill://kpi/references/deep/notes.md",
        "skill://kpi/references/metrics.md",
        "skill://kpi/scripts/check.py",
    ]
    assert [r.readable for r in payload.resources] == [False, True, True, True]
    assert payload.instructions == BODY.strip("\n")
    assert payload.allowed_tools == ("sql_query",) and payload.model == "m1"
    rendered = payload.render()
    assert BODY.strip() in rendered and "skill://kpi/references/metrics.md" in rendered
    assert str(tmp_path) not in rendered
    # Level 3 on demand
    assert catalog.read_resource("kpi", "references/metrics.md").startswith("GMV")
    assert catalog.read_uri("skill://kpi/scripts/check.py") == "print('ok')\n"
    with pytest.raises(SkillNotFound, match="binary"):
        catalog.read_resource("kpi", "assets/logo.png")


@pytest.mark.parametrize(
    "relpath",
    [
        "../kpi/SKILL.md",
        "SKILL.md",
        "references/../SKILL.md",
        "/etc/passwd",
        "references/../../outside.txt",
        "other/ignored.md",
        "references/link.md",
        "references\\metrics.md",
    ],
)
def test_resource_reads_cannot_escape(tmp_path: Path, relpath: str) -> None:
    skills = tmp_path / "skills"
    skill_dir = write_skill(
        skills, "kpi", files={"references/metrics.md": "m\n", "other/ignored.md": "x\n"}
    )
    (tmp_path / "outside.txt").write_text("secret")
    (skill_dir / "references" / "link.md").symlink_to(tmp_path / "outside.txt")
    catalog = load_skills([skills])
    with pytest.raises(SkillNotFound) as exc:
        catalog.read_resource("kpi", relpath)
    assert str(tmp_path) not in str(exc.value)


def test_unknown_skill_and_uri_errors(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path, alpha={})
    with pytest.raises(SkillNotFound, match="available: alpha"):
        catalog.activate("nope")
    for uri in ["http://x/y", "skill://alpha", "skill:///references/x.md"]:
        with pytest.raises(SkillNotFound):
            catalog.read_uri(uri)


# ----------------------------------------------------------------------------- activation stack


def test_cycle_error_names_the_full_path(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path, a={}, b={})
    stack = SkillActivationStack()
    stack.activate(catalog, "a")
    stack.activate(catalog, "b")
    with pytest.raises(SkillCycleError, match="a → b → a"):
        stack.activate(catalog, "a")
    with pytest.raises(SkillCycleError, match="a → b → b"):
        stack.activate(catalog, "b")
    assert stack.chain == ["a", "b"]


def test_depth_cap_default_and_per_skill_override(tmp_path: Path) -> None:
    catalog = catalog_of(
        tmp_path, a={}, b={}, c={}, d={}, wide={"max-depth": 5}, solo={"max-depth": 1}
    )
    stack = SkillActivationStack()
    for name in "abc":
        stack.activate(catalog, name)
    with pytest.raises(SkillDepthError, match=r"limit 3 .*a → b → c"):
        stack.activate(catalog, "d")
    assert stack.depth == 3

    # A skill declaring a larger max-depth allows a deeper chain below it...
    deep = SkillActivationStack()
    for name in ["wide", "a", "b", "c", "d"]:
        deep.activate(catalog, name)
    assert deep.depth == 5
    # ...and the smallest declaration on the chain wins.
    with pytest.raises(SkillDepthError, match="limit 1"):
        SkillActivationStack(frames=deep.frames[:1]).activate(catalog, "solo")
    alone = SkillActivationStack()
    alone.activate(catalog, "solo")
    with pytest.raises(SkillDepthError, match="limit 1"):
        alone.activate(catalog, "a")
    # The configured default applies when nothing declares one.
    assert SkillActivationStack(default_max_depth=1).depth_cap() == 1


def test_instructions_are_injected_only_once(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path, a={}, b={})
    stack = SkillActivationStack()
    first = stack.activate(catalog, "a")
    assert not first.already_loaded and BODY.strip() in first.render()
    stack.pop("a")
    again = stack.activate(catalog, "a")
    assert again.already_loaded and BODY.strip() not in again.render()
    assert "already loaded" in again.render() and stack.chain == ["a"]
    stack.clear()
    assert stack.is_injected("a")
    # After the history holding the instructions was compacted, they are sent again.
    stack.forget_injected(["a"])
    assert not stack.activate(catalog, "a").already_loaded


def test_pop_checks_the_top(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path, a={}, b={})
    stack = SkillActivationStack()
    with pytest.raises(SkillStackError):
        stack.pop()
    stack.activate(catalog, "a")
    stack.activate(catalog, "b")
    with pytest.raises(SkillStackError, match="a → b"):
        stack.pop("a")
    assert stack.pop().name == "b" and stack.pop("a").name == "a"


def test_allowed_tools_intersect_and_model_is_innermost(tmp_path: Path) -> None:
    catalog = catalog_of(
        tmp_path,
        outer={"allowed-tools": ["sql_query", "make_chart", "activate_skill"], "model": "big"},
        free={},
        inner={
            "allowed-tools": ["sql_query", "attribute_change", "activate_skill"],
            "model": "small",
        },
    )
    stack = SkillActivationStack()
    assert stack.effective_allowed_tools() is None and stack.effective_model() is None
    stack.activate(catalog, "outer")
    stack.activate(catalog, "free")
    assert stack.effective_allowed_tools() == {"sql_query", "make_chart", "activate_skill"}
    assert stack.effective_model() == "big"
    stack.activate(catalog, "inner")
    assert stack.effective_allowed_tools() == {"sql_query", "activate_skill"}
    assert stack.effective_model() == "small"
    stack.pop()
    assert stack.effective_model() == "big"


def test_model_cannot_activate_user_only_skill(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path, manual={"disable-model-invocation": True})
    stack = SkillActivationStack()
    with pytest.raises(SkillInvocationDenied):
        stack.activate(catalog, "manual")
    assert stack.depth == 0 and not stack.is_injected("manual")
    assert stack.activate(catalog, "manual", by_model=False).name == "manual"


def test_stack_json_round_trip(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path, a={"allowed-tools": ["sql_query"], "max-depth": 4}, b={})
    stack = SkillActivationStack(default_max_depth=2)
    stack.activate(catalog, "a")
    stack.activate(catalog, "b")
    stack.mark_injected("old")
    data = stack.to_json()
    assert "default_max_depth" not in json.loads(data)
    restored = SkillActivationStack.from_json(data, default_max_depth=3)
    assert restored.frames == stack.frames and restored.injected == ["a", "b", "old"]
    assert restored.default_max_depth == 3
    assert restored.effective_allowed_tools() == {"sql_query"}
    with pytest.raises(SkillCycleError, match="a → b → a"):
        restored.activate(catalog, "a")
    assert SkillActivationStack.from_json(SkillActivationStack().to_json()).depth == 0


# ----------------------------------------------------------------------------- bundled skills

BUNDLED = ["anomaly-detection", "attribution", "report-generation", "visualization"]


def test_bundled_skills_load_cleanly() -> None:
    catalog = load_skills([bundled_skills_dir()])
    assert not catalog.errors, [e.describe() for e in catalog.errors]
    assert set(BUNDLED) <= set(catalog.names())
    for name in BUNDLED:
        skill = catalog.get(name)
        assert skill.model_invocable and skill.allowed_tools is not None
        assert {"activate_skill", "read_skill_file", "todo"} <= set(skill.allowed_tools)
        assert any(r.startswith("references/") for r in skill.resources)
        assert len(skill.instructions.split()) > 300  # real content, not a placeholder
    assert "attribute_change" in catalog.get("attribution").allowed_tools
    assert "generate_report" in catalog.get("report-generation").allowed_tools
    assert "detect_anomalies" in catalog.get("anomaly-detection").allowed_tools
    assert "make_chart" in catalog.get("visualization").allowed_tools
    text = catalog.system_prompt_section()
    assert all(f"- {name}:" in text for name in BUNDLED)


def test_bundled_skill_file_references_resolve() -> None:
    """Every skill:// path and references/ file named in a bundled skill exists."""
    catalog = load_skills([bundled_skills_dir()])
    for name in BUNDLED:
        skill = catalog.get(name)
        texts = [skill.instructions, *(r.text or "" for r in skill.resources.values())]
        for text in texts:
            for uri in re.findall(r"skill://[a-z0-9-]+/[\w./-]+\.md", text):
                assert catalog.read_uri(uri)
            for rel in re.findall(r"`(references/[\w.-]+\.md)`", text):
                assert catalog.read_resource(name, rel), (name, rel)
        for sibling in re.findall(r"`([\w.-]+\.md)`", skill.instructions):
            if "/" not in sibling:
                assert f"references/{sibling}" in skill.resources, (name, sibling)


def test_report_generation_can_orchestrate_the_other_skills() -> None:
    catalog = load_skills([bundled_skills_dir()])
    stack = SkillActivationStack()
    for name in ["report-generation", "anomaly-detection", "attribution", "visualization"]:
        stack.activate(catalog, name)
    tools = stack.effective_allowed_tools()
    assert tools is not None and {"make_chart", "sql_query", "read_skill_file"} <= tools
    assert "generate_report" not in tools  # visualization does not widen its callers' scope
