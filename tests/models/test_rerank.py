"""`HttpReranker` against loopback servers speaking each rerank API as documented: scores back in
the documents' order on one scale, and every failure a `RerankError` that ends, without the key."""

from __future__ import annotations

import math
import socket
import time

import pytest
from pydantic import SecretStr
from support.loopback import Drop, LoopbackServer, Reply, Request, Stall, flaky
from support.rerank_servers import (
    PANDA_DOCUMENTS,
    PANDA_QUERY,
    logit_of,
    probability_of,
    rerank_api,
)
from support.waiting import finishes

from crag.budget import Budget, BudgetReached, DeadlineReached, spending
from crag.errors import ConfigError, RerankError
from crag.interfaces import Reranker
from crag.models.rerank import HttpReranker, clip, endpoint, resolve_shape, sigmoid
from crag.trace import StepRecord, attributing_calls_to

MODEL = "bge-reranker-v2-m3"
EXPECTED = [probability_of(PANDA_QUERY, d) for d in PANDA_DOCUMENTS]
SHAPES = ["cohere", "cohere-v2", "jina", "vllm", "llamacpp", "infinity", "tei"]


def reranker(url: str, **options: object) -> HttpReranker:
    return HttpReranker(**{"base_url": url, "model": MODEL, "timeout": 5.0, **options})  # type: ignore[arg-type]


def test_it_is_a_reranker() -> None:
    assert isinstance(HttpReranker("http://127.0.0.1:1"), Reranker)


@pytest.mark.parametrize("shape", SHAPES)
async def test_each_shape_gives_scores_in_document_order(shape: str) -> None:
    with LoopbackServer(rerank_api(shape)) as server:
        scores = await finishes(reranker(server.url, shape=shape).rerank(PANDA_QUERY, PANDA_DOCUMENTS))
    assert scores == pytest.approx(EXPECTED)
    (request,) = server.requests  # one request, every document in it
    assert request.path == endpoint(server.url, shape).removeprefix(server.url)
    sent = request.json["texts" if shape == "tei" else "documents"]
    assert sent == PANDA_DOCUMENTS
    if shape != "tei":
        assert request.json["top_n"] == len(PANDA_DOCUMENTS)


async def test_the_servers_sort_by_score_so_the_index_puts_them_back() -> None:
    with LoopbackServer(rerank_api("jina")) as server:
        await reranker(server.url, shape="jina").rerank(PANDA_QUERY, PANDA_DOCUMENTS)
    request = server.requests[0]
    reply = rerank_api("jina")(request).body  # the reply as it was: best first, not in document order
    assert [r["index"] for r in reply["results"]] == [2, 1, 0]


@pytest.mark.parametrize("shape", ["vllm", "llamacpp", "infinity", "infinity-old"])
async def test_auto_speaks_to_any_server_at_its_rerank_route(shape: str) -> None:
    with LoopbackServer(rerank_api(shape)) as server:
        scores = await reranker(server.url).rerank(PANDA_QUERY, PANDA_DOCUMENTS)
    assert scores == pytest.approx(EXPECTED)
    assert server.requests[0].path == "/rerank"


async def test_auto_at_a_tei_server_says_to_set_its_shape() -> None:
    with LoopbackServer(rerank_api("tei")) as server, pytest.raises(RerankError, match=r'HTTP 422.*shape "tei"'):
        await reranker(server.url).rerank(PANDA_QUERY, PANDA_DOCUMENTS)
    assert len(server.requests) == 1  # a 4xx is not tried again


def test_auto_picks_the_hosted_apis_by_host() -> None:
    assert resolve_shape("auto", "https://api.cohere.com") == "cohere-v2"
    assert resolve_shape("auto", "https://api.cohere.ai/v1") == "cohere-v2"
    assert resolve_shape("auto", "https://api.jina.ai/v1") == "jina"
    assert resolve_shape("auto", "http://localhost:8080") == "auto"
    assert endpoint("https://api.cohere.com/v1", "cohere-v2") == "https://api.cohere.com/v2/rerank"
    assert endpoint("http://localhost:8000/v1", "vllm") == "http://localhost:8000/v1/rerank"
    assert endpoint("http://localhost:8000/v2/rerank/", "auto") == "http://localhost:8000/v2/rerank"


async def test_logits_are_squashed_alike_for_llamacpp_and_tei_raw_scores() -> None:
    logits = [logit_of(PANDA_QUERY, d) for d in PANDA_DOCUMENTS]
    assert any(x > 1 for x in logits) and any(x < 0 for x in logits)  # raw, not probabilities
    got = {}
    for shape, scores in [("llamacpp", "auto"), ("tei", "logit"), ("tei", "auto"), ("llamacpp", "logit")]:
        with LoopbackServer(rerank_api(shape)) as server:
            got[shape, scores] = await reranker(server.url, shape=shape, scores=scores).rerank(
                PANDA_QUERY, PANDA_DOCUMENTS)
        if shape == "tei":
            assert server.requests[0].json["raw_scores"] is (scores == "logit")
    for scores in got.values():
        assert scores == pytest.approx([sigmoid(x) for x in logits])


async def test_auto_keeps_one_scale_once_a_server_gave_logits() -> None:
    replies = [[{"index": 0, "score": 3.0}, {"index": 1, "score": -2.0}],
               [{"index": 0, "score": 0.5}, {"index": 1, "score": 0.25}]]  # logits that happen to lie in [0, 1]
    with LoopbackServer(lambda request: Reply(200, replies.pop(0))) as server:
        rr = reranker(server.url, shape="tei")
        await rr.rerank("q", ["a", "b"])
        assert await rr.rerank("q", ["a", "b"]) == pytest.approx([sigmoid(0.5), sigmoid(0.25)])


async def test_probability_refuses_scores_outside_0_1() -> None:
    with LoopbackServer(rerank_api("llamacpp")) as server, pytest.raises(RerankError, match="outside"):
        await reranker(server.url, shape="llamacpp", scores="probability").rerank(PANDA_QUERY, PANDA_DOCUMENTS)


async def test_the_key_is_sent_and_never_shown() -> None:
    key = "rk-loopback-secret-0123456789"

    def refuse(request: Request) -> Reply:
        return Reply(401, {"message": f"invalid api token {request.headers.get('authorization')}"})

    with LoopbackServer(rerank_api("cohere-v2")) as server:
        await reranker(server.url, shape="cohere-v2", api_key=SecretStr(key)).rerank(PANDA_QUERY, PANDA_DOCUMENTS)
    assert server.requests[0].headers["authorization"] == f"Bearer {key}"
    with LoopbackServer(refuse) as server:
        rr = reranker(server.url, api_key=key)
        with pytest.raises(RerankError, match="HTTP 401") as caught:
            await rr.rerank(PANDA_QUERY, PANDA_DOCUMENTS)
    assert len(server.requests) == 1
    assert key not in str(caught.value) and key not in repr(rr)


async def test_long_documents_are_cut_to_max_chars() -> None:
    long = "panda " * 1000
    with LoopbackServer(rerank_api("infinity")) as server:
        await reranker(server.url, shape="infinity", max_chars=100).rerank("panda", [long, "hi"])
    sent = server.requests[0].json["documents"]
    assert len(sent[0]) <= 100 and sent[1] == "hi"
    assert clip("abcdefgh ijk", 10) == "abcdefgh"  # at a word's end when one is near


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_a_server_that_is_down_is_a_rerank_error() -> None:
    with pytest.raises(RerankError, match="could not be reached.*tried twice"):
        await finishes(reranker(f"http://127.0.0.1:{_free_port()}").rerank(PANDA_QUERY, PANDA_DOCUMENTS))


async def test_a_slow_server_is_a_rerank_error_after_two_tries() -> None:
    tried_twice = pytest.raises(RerankError, match="did not answer within.*tried twice")
    with LoopbackServer(lambda request: Stall(60)) as server, tried_twice:
        await finishes(reranker(server.url, timeout=0.2).rerank(PANDA_QUERY, PANDA_DOCUMENTS))
    assert len(server.requests) == 2


@pytest.mark.parametrize("fault", [Reply(500, {"error": "boom"}), Reply(503, "loading"), Drop(reset=True)])
async def test_one_failure_is_tried_again(fault: object) -> None:
    with LoopbackServer(flaky([fault], rerank_api("vllm"))) as server:  # type: ignore[list-item]
        scores = await finishes(reranker(server.url, shape="vllm").rerank(PANDA_QUERY, PANDA_DOCUMENTS))
    assert scores == pytest.approx(EXPECTED)
    assert len(server.requests) == 2


async def test_two_failures_are_a_rerank_error() -> None:
    failing_twice = flaky([Reply(500, {"error": "boom"})] * 2, rerank_api("vllm"))
    with LoopbackServer(failing_twice) as server, pytest.raises(RerankError, match="HTTP 500.*tried twice"):
        await finishes(reranker(server.url, shape="vllm").rerank(PANDA_QUERY, PANDA_DOCUMENTS))
    assert len(server.requests) == 2


def _results(*entries: dict) -> Reply:
    return Reply(200, {"results": list(entries)})


GARBAGE = {
    "index out of range": (_results({"index": 0, "relevance_score": 0.1}, {"index": 1, "relevance_score": 0.2},
                                    {"index": 3, "relevance_score": 0.3}), "index 3 for 3 documents"),
    "index repeated": (_results({"index": 0, "relevance_score": 0.1}, {"index": 0, "relevance_score": 0.2},
                                {"index": 1, "relevance_score": 0.3}), "index 0 twice"),
    "index not a number": (_results({"index": "0", "relevance_score": 0.1}), "index"),
    "NaN": (Reply(200, '{"results": [{"index": 0, "relevance_score": NaN}, {"index": 1, "relevance_score": 0.1},'
                       ' {"index": 2, "relevance_score": 0.1}]}', headers={"Content-Type": "application/json"}),
            "score NaN"),
    "infinite": (Reply(200, '[{"index": 0, "score": Infinity}]', headers={"Content-Type": "application/json"}),
                 "score Infinity"),
    "score a string": (_results({"index": 0, "relevance_score": "0.9"}), "score"),
    "missing results": (_results({"index": 2, "relevance_score": 0.9}), "left 2 of 3 documents out"),
    "no results list": (Reply(200, {"object": "list", "data": None}), "without a results list"),
    "not JSON": (Reply(200, "<html>It works!</html>"), "not JSON"),
}


@pytest.mark.parametrize("name", list(GARBAGE))
async def test_garbage_is_a_rerank_error_naming_it(name: str) -> None:
    reply, says = GARBAGE[name]
    with LoopbackServer(lambda request: reply) as server, pytest.raises(RerankError, match=says):
        await finishes(reranker(server.url).rerank(PANDA_QUERY, PANDA_DOCUMENTS))
    assert len(server.requests) == 1  # the server answered: asking again would get the same


async def test_a_server_keeping_its_own_top_n_is_missing_documents() -> None:
    def top_two(request: Request) -> Reply:
        return rerank_api("vllm")(Request(**{**request.__dict__, "json": {**request.json, "top_n": 2}}))

    with LoopbackServer(top_two) as server, pytest.raises(RerankError, match="left 1 of 3 documents out"):
        await reranker(server.url, shape="vllm").rerank(PANDA_QUERY, PANDA_DOCUMENTS)


async def test_one_call_on_the_budget_and_the_step() -> None:
    budget, step = Budget(calls=5), StepRecord(name="grade", input_event="x", started=0.0)
    with LoopbackServer(rerank_api("infinity")) as server, spending(budget), attributing_calls_to(step):
        await reranker(server.url, shape="infinity").rerank(PANDA_QUERY, PANDA_DOCUMENTS)
        assert await reranker(server.url).rerank(PANDA_QUERY, []) == []  # nothing to ask: no call
    assert budget.spent_calls == 1 and step.llm_calls == 1


async def test_a_spent_budget_sends_nothing() -> None:
    refused = pytest.raises(BudgetReached)
    with LoopbackServer(rerank_api("infinity")) as server, spending(Budget(calls=0)), refused:
        await reranker(server.url).rerank(PANDA_QUERY, PANDA_DOCUMENTS)
    assert server.requests == []


async def test_the_runs_deadline_ends_the_request_and_its_retry() -> None:
    budget = Budget(deadline=time.monotonic() + 0.3)
    step = StepRecord(name="grade", input_event="x", started=0.0)
    ended = pytest.raises(DeadlineReached)
    with LoopbackServer(lambda request: Stall(60)) as server, spending(budget), attributing_calls_to(step), ended:
        await finishes(reranker(server.url, timeout=30).rerank(PANDA_QUERY, PANDA_DOCUMENTS))
    assert budget.stopped == 1 and budget.spent_calls == 1 and step.llm_calls == 1


@pytest.mark.parametrize("options, says", [
    ({"shape": "cohere-v2", "model": None}, "needs a model"),
    ({"shape": "bedrock"}, "shape must be one of"),
    ({"scores": "softmax"}, "scores must be one of"),
    ({"max_chars": 0}, "positive"),
    ({"base_url": "localhost:8080"}, "http"),
])
def test_bad_settings_are_config_errors(options: dict, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        reranker(str(options.pop("base_url", "http://127.0.0.1:1")), **options)


def test_sigmoid_does_not_overflow() -> None:
    assert sigmoid(-1000.0) == 0.0 and sigmoid(1000.0) == 1.0 and math.isclose(sigmoid(0.0), 0.5)
