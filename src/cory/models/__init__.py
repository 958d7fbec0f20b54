"""Language models: loading by spec, the policy with its value head, and sampling."""
