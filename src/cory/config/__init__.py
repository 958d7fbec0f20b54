"""From text to a validated run configuration: the schema (``schema``), the nested-dict
tree and its overrides (``tree``), the method presets (``methods``), reading YAML with its
``base:`` chain (``loading``), the checks that name a bad key and its fix (``validation``)
and the checks that need the machine (``preflight``)."""
