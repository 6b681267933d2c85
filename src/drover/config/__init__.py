"""Settings: the config file, the environment and flags (:mod:`.settings`), the file's tables
(:mod:`.tables`, :mod:`.provider_tables`), ``${VAR}`` expansion, the working directory a run is
given, and drover's own private files and directories."""
