"""The misgendering meta-evaluation (Subramonian et al. 2025): the study's tables from stored evidence (`tables`),
the agreement statistics (`stats`), human annotation sheets (`annotations`) and the HTML report (`report`)."""
