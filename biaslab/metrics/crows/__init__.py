"""CrowS-Pairs (Nangia et al., EMNLP 2020; the revised English set of Névéol et al., ACL 2022): the paper's metric
and lm-evaluation-harness's from stored per-token scores (`stats`), the study's tables (`tables`), its comparisons
(`compare`) and its report (`report`)."""
