"""Skills: packaged instructions for kinds of analysis, disclosed to the model progressively.

Level 1 (name + description) sits in the system prompt, level 2 (full instructions) is
returned when the model calls ``activate_skill``, level 3 (reference files) is read on demand.
"""

from agent_core.skills.activation import (
    DEFAULT_MAX_DEPTH,
    ActivationFrame,
    SkillActivation,
    SkillActivationStack,
)
from agent_core.skills.loader import (
    SkillCatalog,
    bundled_skills_dir,
    load_skills,
    parse_skill,
    parse_skill_uri,
)
from agent_core.skills.model import (
    ActivationPayload,
    Skill,
    SkillActivationError,
    SkillCycleError,
    SkillDepthError,
    SkillError,
    SkillFrontmatter,
    SkillInvocationDenied,
    SkillIssue,
    SkillNotFound,
    SkillResource,
    SkillResourceInfo,
    SkillStackError,
    SkillValidationError,
    skill_uri,
)

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "ActivationFrame",
    "ActivationPayload",
    "Skill",
    "SkillActivation",
    "SkillActivationError",
    "SkillActivationStack",
    "SkillCatalog",
    "SkillCycleError",
    "SkillDepthError",
    "SkillError",
    "SkillFrontmatter",
    "SkillInvocationDenied",
    "SkillIssue",
    "SkillNotFound",
    "SkillResource",
    "SkillResourceInfo",
    "SkillStackError",
    "SkillValidationError",
    "bundled_skills_dir",
    "load_skills",
    "parse_skill",
    "parse_skill_uri",
    "skill_uri",
]
