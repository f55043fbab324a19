"""Every use of a dependency's private API, in one room.

A minor release of a dependency may rename or drop anything whose name starts with `_`. Each
module here wraps one dependency's private parts (`openai`, `llama_agents`, `workflows`,
`llama_index`, `pptx`, `nltk`), says the version it was written against and why no public API would do, and
`tests/test_private_api.py` fails with the dependency's name and version when one of them
changes, so the break shows here and not in a run. `tests/test_layers.py` fails when a module
outside this package uses a dependency's private name, by import, attribute or override.
"""
