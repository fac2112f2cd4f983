"""BBQ (Parrish et al., Findings of ACL 2022): accuracy and bias scores from answer probabilities (`stats`), the
study's tables read from a warehouse (`tables`), its comparisons (`compare`) and its report (`report`)."""
