"""The package's version: the version of include/dlcache/version.h that its struct mirrors
(_lib.py) were written for; _lib.py refuses a library of another version.
tests/python/test_packaging.py checks that the two agree."""

__version__ = "1.0.0"
