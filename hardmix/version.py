"""The version of hardmix, in a module of its own: the command line and the results records import it from
here, so that they work even where a folder named ``hardmix/`` in the working directory (a clone of the
repository) shadows the package's ``__init__`` as a namespace package over an editable install."""

__version__ = "0.1.0"
