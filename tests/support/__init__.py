"""What the tests share that is not a fixture: helpers, fakes, constants and paths, imported as
`from support.<module> import ...` (pyproject's `pythonpath = ["tests"]`). Fixtures live in the
`conftest.py` files; no test module imports another (tests/test_test_layout.py).

- `paths`: the repository's folders and the tests' data.
- `marks`: `BROWSER`, for a module that needs Chromium.
- `corpus`: small corpora written and ingested in a test.
- `pages`: a drawn page's text as a reader sees it.
- `waiting`: bounded waits, a guard against a hang and never a measure of speed.
- `workflow`: the corrective workflow's steps and events, and fake components for it.
- `serving`: `crag serve`'s app under uvicorn on loopback, with the settings the tests give it.
- `stores`: run stores filled with handlers, and `GET /handlers` on them.
- `postgres`: a throwaway PostgreSQL cluster of one test's own.
- `loopback`: loopback HTTP servers that speak OpenAI's and Tavily's APIs.
- `hostile`: hostile files (zip bombs, slow PDFs, sparse files), made in the test.
- `keys`: the key ring's scrypt, counted.
"""
