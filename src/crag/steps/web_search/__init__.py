"""Web search: a BM25 search over a local corpus (offline), or Tavily.

- `local`: `LocalCorpusSearch`, the offline stand-in for the web;
- `tavily`: `TavilySearch`, Tavily's API;
- `http`: the retrying, checking HTTP session and the thread Tavily's client runs in.
"""

from crag.steps.web_search.local import LocalCorpusSearch
from crag.steps.web_search.tavily import TavilySearch

__all__ = ["LocalCorpusSearch", "TavilySearch"]
