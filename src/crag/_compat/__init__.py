"""Every use of a dependency's private API, in one room.

A minor release of a dependency may rename or drop anything whose name starts with `_`. Each
module here wraps one dependency's private parts, and `tests/test_private_api.py` fails with the
dependency's name and version when one of them changes, so the break shows here and not in
a run.
"""
