"""A user's own dataset: stimuli from a table file (`files`) or expanded from a template spec (`spec`)."""
