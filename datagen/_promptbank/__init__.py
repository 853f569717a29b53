"""Question templates and fact tables behind ``datagen.promptset`` (data, written for this project)."""
