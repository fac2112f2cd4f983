"""Contextual invariance on WinoPron (Kumar et al. 2026): the statistics (`stats`: p(feminine), KL, Spearman, mutual
information, `cbd`: Contextuality-by-Default, `information`: entropy and mutual-information estimators), the tables
read from a warehouse (`tables`) and the HTML report (`report`)."""
