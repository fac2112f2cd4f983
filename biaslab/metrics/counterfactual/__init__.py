"""Counterfactual audits of your own prompts (LangFair's use-case method): text measures of generated answers
(`measures`), their per-prompt comparison and summary (`stats`), the tables (`tables`), `compare` and the report."""
