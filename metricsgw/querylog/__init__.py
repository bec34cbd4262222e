"""The query log: every PromQL query's outcome, in a file and in the lists of the status endpoints, and the queries
running now (docs/endpoints.md, "The query log")."""
