"""Negation bias (Wang, Sommerauer and Bloem): the linear mixed model and its predictions (`model`, with
Satterthwaite degrees of freedom in `satterthwaite`), the tables read from a warehouse (`tables`) and the HTML
report with the paper's Figure 2 (`report`)."""
