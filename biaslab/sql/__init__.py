"""biaslab's SQL: the numbered schema migrations (`schema/*.sql`), the table macros (`macros/*.sql`), and the one way
a name or a path goes into SQL text (`quoting`)."""
