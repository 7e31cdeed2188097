"""The business-analysis skills bundled with BA-Agent Gateway (one folder per skill, each with
its SKILL.md and references). A package so that a wheel install ships them; operators add or
override skills with `BA_SKILLS_DIR`."""
