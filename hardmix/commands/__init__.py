"""The core's own small commands that are not a part's: ``hardmix config`` (:mod:`~hardmix.commands.config`)
and ``hardmix neighbours`` (:mod:`~hardmix.commands.neighbours`). ``hardmix.cli`` parses the command line
and imports each only when its command runs; ``compare`` and ``data`` keep their commands in their folders."""
