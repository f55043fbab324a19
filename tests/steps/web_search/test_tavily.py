"""crag's Tavily web search against a loopback server speaking Tavily's search API.

`TavilySearch` wraps llama-index-tools-tavily-research, whose `TavilyClient` (requests)
posts to `{base_url}/search`; here base_url is a server on 127.0.0.1.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core.schema import NodeWithScore
from support.loopback import LoopbackServer, Reply, Stall, failing, tavily_result, tavily_search

import crag
from crag.steps.web_search import TavilySearch

MONA_LISA = tavily_result(
    "Mona Lisa - Wikipedia",
    "https://en.wikipedia.org/wiki/Mona_Lisa",
    "The Mona Lisa is a portrait painted by Leonardo da Vinci. It hangs in the Louvre in Paris.",
    score=0.98,
)
LOUVRE = tavily_result("Louvre Museum", "https://www.louvre.fr/en",
                       "The Louvre is the most visited museum in the world.", score=0.71)
SALVATOR = tavily_result("Salvator Mundi", "https://en.wikipedia.org/wiki/Salvator_Mundi",
                         "Salvator Mundi is a painting attributed to Leonardo.", score=0.42)


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    """A small index about a drone: nothing in it is about paintings."""
    root = tmp_path_factory.mktemp("tavily")
    docs = root / "docs"
    docs.mkdir()
    (docs / "battery.md").write_text("# Battery\nThe Zephyr drone battery lasts 42 minutes.\n")
    (docs / "camera.md").write_text("# Camera\nThe Zephyr camera records 4K video at 60 fps.\n")
    crag.ingest([docs], root / "index")
    return root / "index"


def web_settings(server: LoopbackServer, index_dir: Path, **env: str) -> crag.Settings:
    """Offline components (no LLM) with Tavily at the loopback server."""
    return crag.Settings.load(
        env={"TAVILY_API_KEY": "tvly-test", "CRAG_WEB_SEARCH__BASE_URL": server.url, **env},
        index={"path": index_dir},
    )


def web_workflow(server: LoopbackServer, index_dir: Path, **env: str) -> crag.CorrectiveRAGWorkflow:
    settings = web_settings(server, index_dir, **env)
    return crag.build_workflow(settings, index=crag.ChunkIndex.load(index_dir))


# --- TavilySearch on its own -----------------------------------------------------------------


async def test_search_posts_the_query_to_base_url_with_the_key_as_bearer_token():
    with LoopbackServer(tavily_search([MONA_LISA])) as server:
        searcher = TavilySearch(api_key="tvly-test", base_url=server.url, top_k=4)
        await searcher.search("mona lisa painter")

    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/search")
    assert request.headers["authorization"] == "Bearer tvly-test"
    assert request.headers["content-type"] == "application/json"
    assert request.json["query"] == "mona lisa painter"
    assert request.json["max_results"] == 4
    assert request.json["search_depth"] == "advanced"
    assert "api_key" not in request.json  # the key travels only in the header


async def test_results_become_web_nodes_with_url_metadata_in_rank_order():
    with LoopbackServer(tavily_search([MONA_LISA, LOUVRE, SALVATOR])) as server:
        nodes = await TavilySearch(api_key="tvly-test", base_url=server.url).search("mona lisa")

    assert all(isinstance(n, NodeWithScore) for n in nodes)
    expected = (MONA_LISA, LOUVRE, SALVATOR)
    assert [n.node.get_content() for n in nodes] == [r["content"] for r in expected]
    assert [n.node.metadata["url"] for n in nodes] == [r["url"] for r in expected]
    assert all(n.node.metadata["kind"] == "web" for n in nodes)
    assert [n.node.node_id for n in nodes] == [f"web:{r['url']}" for r in expected]
    assert nodes[0].score > nodes[1].score > nodes[2].score


async def test_an_empty_result_list_is_no_results_not_an_error():
    with LoopbackServer(tavily_search([])) as server:
        assert await TavilySearch(api_key="tvly-test", base_url=server.url).search("nothing") == []


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (500, {"detail": {"error": "internal"}}, "500 Server Error"),
        (502, "Bad Gateway", "502 Server Error"),
        (401, {"detail": {"error": "Unauthorized: invalid API key."}}, "invalid API key"),
        (429, {"detail": {"error": "Usage limit exceeded."}}, "Usage limit exceeded"),
    ],
)
async def test_http_errors_raise_search_error_naming_tavily_and_the_cause(status, body, expected):
    with LoopbackServer(failing(status, body)) as server:
        searcher = TavilySearch(api_key="tvly-test", base_url=server.url)
        with pytest.raises(crag.SearchError, match="Tavily search failed") as caught:
            await searcher.search("mona lisa")

    assert expected in str(caught.value)
    assert isinstance(caught.value, crag.CragError)


async def test_unreachable_server_raises_search_error():
    with LoopbackServer(failing(500)) as server:
        url = server.url
    # the server is shut down now: nothing listens on its port
    with pytest.raises(crag.SearchError, match="Tavily search failed: ConnectionError"):
        await TavilySearch(api_key="tvly-test", base_url=url).search("mona lisa")


# --- Tavily chosen by settings, end to end ---------------------------------------------------


async def test_settings_with_a_tavily_key_choose_tavily_and_top_k_sets_max_results(index_dir):
    with LoopbackServer(tavily_search([MONA_LISA, LOUVRE, SALVATOR])) as server:
        workflow = web_workflow(server, index_dir, CRAG_WEB_SEARCH__TOP_K="2")
        assert isinstance(workflow.searcher, TavilySearch)
        nodes = await workflow.searcher.search("mona lisa")

    assert server.requests[0].json["max_results"] == 2
    assert len(nodes) == 2


async def test_unrelated_question_is_answered_from_tavily_results_with_web_sources(index_dir):
    """Offline grader finds nothing about paintings in drone docs -> Incorrect -> Tavily."""
    with LoopbackServer(tavily_search([MONA_LISA, LOUVRE])) as server:
        workflow = web_workflow(server, index_dir)
        result = await workflow.run(query="Who painted the Mona Lisa?")

    assert result.verdict is crag.Verdict.INCORRECT
    assert all(g.grader == "lexical" for g in result.grades)
    (request,) = server.requests
    assert request.json["query"] == result.rewritten_query == "painted mona lisa"
    assert "Leonardo da Vinci" in result.answer
    assert result.sources, "the answer should cite the web result"
    assert {(s.kind, s.url) for s in result.sources} == {("web", MONA_LISA["url"])}
    assert "Leonardo da Vinci" in result.sources[0].text
    assert result.steps[-4:] == ["web_search", "refine_web", "hop", "synthesize"]


async def test_a_tavily_outage_during_a_run_degrades_to_internal_knowledge(index_dir):
    """500 on every attempt: retried, then the run answers from its own documents, marked."""
    with LoopbackServer(failing(500)) as server:
        workflow = web_workflow(server, index_dir, CRAG_WEB_SEARCH__MAX_RETRIES="1")
        result = await workflow.run(query="Who painted the Mona Lisa?")

    assert [r.path for r in server.requests] == ["/search", "/search"]  # one retry
    assert result.verdict is crag.Verdict.INCORRECT
    assert len(result.degraded) == 1
    assert result.degraded[0].startswith("web_search: web search failed (SearchError: Tavily search failed")
    assert all(s.kind == "internal" for s in result.sources)


async def test_a_tavily_that_never_answers_is_ended_by_the_runs_deadline(index_dir):
    """Its own timeout (20 s an attempt, with retries) would outlast the run's limit: the run's
    deadline ends the search, and the answer comes from the user's documents, marked."""
    with LoopbackServer(lambda request: Stall(3600)) as server:
        workflow = web_workflow(server, index_dir, CRAG_RUN__TIMEOUT="4", CRAG_RUN__FALLBACK_SECONDS="2")
        result = await workflow.run(query="Who painted the Mona Lisa?")

    assert len(server.requests) == 1
    assert result.verdict is crag.Verdict.INCORRECT and result.answer.strip()
    assert result.degraded[0].startswith("web_search: web search failed (DeadlineReached: the run's "
                                         "deadline ended the web search after ")
    assert all(s.kind == "internal" for s in result.sources)


async def test_answerable_question_does_not_call_tavily(index_dir):
    """A Correct verdict never leaves the user's documents."""
    with LoopbackServer(lambda request: Reply(500, "must not be called")) as server:
        workflow = web_workflow(server, index_dir)
        result = await workflow.run(query="How long does the Zephyr drone battery last?")

    assert result.verdict is crag.Verdict.CORRECT
    assert server.requests == []
    assert all(s.kind == "internal" for s in result.sources)
