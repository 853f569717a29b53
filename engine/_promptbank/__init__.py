"""Question templates and fact tables behind ``engine.promptset`` (data, written for this project)."""
