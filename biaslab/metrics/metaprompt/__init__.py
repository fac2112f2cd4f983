"""Metaprompting comprehension checks (the contextual-invariance paper's Table 4): accuracy per question (`tables`)."""
