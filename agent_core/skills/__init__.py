"""Skills: packaged instructions for kinds of analysis, disclosed to the model progressively.

Level 1 (name + description) sits in the system prompt, level 2 (full instructions) is
returned when the model calls ``activate_skill``, level 3 (reference files) is read on demand.
"""
