"""The LLM generator's prompt templates (*.md), a package so that an installed kernelbot carries them."""
