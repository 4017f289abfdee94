"""Configs: the one loader that validates YAML into dataclasses (:mod:`~hardmix.config.loader`), the JSON
Schema generated from the same dataclasses (:mod:`~hardmix.config.schema`) and the table of an older
hardmix's keys (:mod:`~hardmix.config.old_keys`). Nothing here trains, evaluates or reads data (the data
root is :mod:`hardmix.datasets.paths`)."""
