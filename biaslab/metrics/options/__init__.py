"""Generic metrics of any dataset with options (`biaslab metrics options`): statistics, tables and report."""
