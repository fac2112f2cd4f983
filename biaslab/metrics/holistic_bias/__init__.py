"""HolisticBias (Smith et al., EMNLP 2022): likelihood bias from sentence perplexities, the Mann-Whitney U test of
every descriptor pair per axis and template (`stats`)."""
