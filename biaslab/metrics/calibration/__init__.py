"""Pronoun calibration (Gender-ECE, Sabir et al.): the ECE family, Brier, Gender-ECE, cc-ECE and post-hoc calibrators
(`stats`), the study's tables read from a warehouse (`tables`) and the HTML report with reliability diagrams
(`report`)."""
