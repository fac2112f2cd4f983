"""DecodingTrust's stereotype agreement (Wang et al., NeurIPS 2023): classified answers to stereotype statements,
the agreement index per group, topic and condition, the published summary and biaslab's intervals (`stats`)."""
