"""Where vectors are searched: exactly, over the index's own embeddings (the default), or on a
real Chroma server on loopback, chosen by `[vector_store]` alone; the same tests run against both."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from crag import ConfigError, IngestError, ingest
from crag.index import ChunkIndex, VectorStoreOptions
from crag.index.vectors import ChromaStore, client_for
from crag.models import WordLlamaEmbedding


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`chroma run` (the server shipped in the chromadb wheel) on a free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    chroma = Path(sys.executable).with_name("chroma")
    data = tmp_path_factory.mktemp("chroma-server")
    server = subprocess.Popen(
        [str(chroma), "run", "--path", str(data), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, "chroma server did not start"
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    server.terminate()
    server.wait(10)


@pytest.fixture(params=["embedded", "server"])
def settings(request: pytest.FixtureRequest) -> VectorStoreOptions:
    if request.param == "embedded":
        return VectorStoreOptions()
    uri = request.getfixturevalue("chroma_server")
    return VectorStoreOptions(kind="server", uri=uri, collection=f"t{abs(hash(request.node.name)) % 10**8}")


def unit(rows: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((rows, 256)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_add_query_and_delete_by_document_round_trip(chroma_server: str, tmp_path: Path) -> None:
    settings = VectorStoreOptions(kind="server", uri=chroma_server, collection="roundtrip")
    vectors = unit(6, seed=0)
    store = ChromaStore(client_for(settings, tmp_path), f"{settings.collection}-rt", create=True)
    try:
        store.add([f"c{i}" for i in range(6)], ["a", "a", "b", "b", "c", "c"], vectors)
        hits = store.query(vectors[3], 2)
        assert hits[0][0] == "c3" and hits[0][1] == pytest.approx(1.0, abs=1e-5)
        store.delete_documents(["b"])
        assert store.ids() == {"c0", "c1", "c4", "c5"}
        assert "c3" not in [i for i, _ in store.query(vectors[3], 6)]
    finally:
        store.close()


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "tea.txt").write_text("Tea was first drunk in China. Green tea is not oxidised.")
    (folder / "coffee.txt").write_text("Coffee beans are roasted seeds of the coffee plant.")
    (folder / "cocoa.txt").write_text("Cocoa comes from the beans of the cacao tree.")
    return folder


def nearest(index: ChunkIndex, text: str, k: int = 3) -> list[tuple[str, float]]:
    vector = WordLlamaEmbedding().embed_many([text])[0]
    return [(index.nodes[p].get_content(), round(s, 5)) for p, s in index.vector_search(vector, k)]


def test_the_store_gives_the_exact_ranking_and_a_reopened_index_the_same(
    settings: VectorStoreOptions, docs: Path, tmp_path: Path
) -> None:
    ingest([docs], tmp_path / "index", vector_store=settings)
    index = ChunkIndex.load(tmp_path / "index", settings)
    assert index.vectors["kind"] == settings.kind
    found = nearest(index, "roasted coffee")
    in_memory = ChunkIndex(nodes=index.nodes, embeddings=index.embeddings)  # exact, in NumPy
    assert [t for t, _ in found] == [t for t, _ in nearest(in_memory, "roasted coffee")]
    assert found[0][0].startswith("Coffee")
    index.close()
    assert nearest(ChunkIndex.load(tmp_path / "index", settings), "roasted coffee") == found


def test_a_changed_file_replaces_its_vectors(settings: VectorStoreOptions, docs: Path, tmp_path: Path) -> None:
    ingest([docs], tmp_path / "index", vector_store=settings)
    (docs / "coffee.txt").write_text("Espresso is brewed by forcing hot water through ground beans.")
    ingest([docs], tmp_path / "index", vector_store=settings)
    index = ChunkIndex.load(tmp_path / "index", settings)
    texts = [t for t, _ in nearest(index, "coffee espresso roasted", k=10)]
    assert len(texts) == 3 and texts[0].startswith("Espresso")
    assert not any(t.startswith("Coffee beans") for t in texts)
    if settings.kind == "server":
        store = ChromaStore(client_for(settings, tmp_path / "index"), index.vectors["collection"])
        assert store.ids() == {n.node_id for n in index.nodes}  # the old chunk's vector is gone
        store.close()


def test_a_failed_write_leaves_the_old_index_and_its_vectors_searchable(
    settings: VectorStoreOptions, docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest([docs], tmp_path / "index", vector_store=settings)
    before = nearest(ChunkIndex.load(tmp_path / "index", settings), "cacao tree")
    (docs / "cocoa.txt").write_text("Chocolate is made from fermented cacao.")

    def crash(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("crag.index.layout.fsync_dir", crash)  # after the vectors, before the switch
    with pytest.raises(IngestError, match="the index is unchanged"):
        ingest([docs], tmp_path / "index", vector_store=settings)
    monkeypatch.undo()
    assert nearest(ChunkIndex.load(tmp_path / "index", settings), "cacao tree") == before


def test_the_embedded_store_lives_in_the_index_folder_and_moves_with_it(docs: Path, tmp_path: Path) -> None:
    ingest([docs], tmp_path / "index")
    shutil.move(tmp_path / "index", tmp_path / "moved")
    assert nearest(ChunkIndex.load(tmp_path / "moved"), "roasted coffee")[0][0].startswith("Coffee")


def test_the_default_store_needs_no_chroma(docs: Path, tmp_path: Path) -> None:
    code = (
        "import sys, crag\n"
        f"crag.ingest([{str(docs)!r}], {str(tmp_path / 'index')!r})\n"
        f"wf = crag.build_workflow(crag.Settings.load(env={{}}, index={{'path': {str(tmp_path / 'index')!r}}}))\n"
        "print(wf.ask('What is roasted?').answer)\n"
        "print('chromadb' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Coffee" in out.stdout and out.stdout.split()[-1] == "False"


def test_a_server_index_opened_without_server_settings_says_what_to_set(
    chroma_server: str, docs: Path, tmp_path: Path
) -> None:
    ingest([docs], tmp_path / "index", vector_store=VectorStoreOptions(kind="server", uri=chroma_server))
    with pytest.raises(ConfigError, match=r"\[vector_store\] kind = \"server\""):
        nearest(ChunkIndex.load(tmp_path / "index"), "coffee")


def test_a_server_without_a_uri_or_with_a_bad_one_is_a_settings_error(docs: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="vector_store.uri is not set"):
        ingest([docs], tmp_path / "index", vector_store=VectorStoreOptions(kind="server"))
    with pytest.raises(ConfigError, match="not an http"):
        ingest([docs], tmp_path / "index", vector_store=VectorStoreOptions(kind="server", uri="chroma:8000"))


def test_a_server_keeps_the_live_collection_and_the_one_before_it(
    chroma_server: str, docs: Path, tmp_path: Path
) -> None:
    """The one before stays for readers that opened the previous version just before the switch."""
    settings = VectorStoreOptions(kind="server", uri=chroma_server, collection="kept")
    for text in ("Coffee is roasted.", "Coffee is ground.", "Coffee is brewed."):
        (docs / "coffee.txt").write_text(text)
        ingest([docs], tmp_path / "index", vector_store=settings)
    client = client_for(settings, tmp_path)
    names = sorted(c.name for c in client.list_collections() if c.name.startswith("kept-"))
    client.close()
    assert names == ["kept-2", "kept-3"]


def test_re_chunking_on_a_server_writes_the_next_collection(
    chroma_server: str, docs: Path, tmp_path: Path
) -> None:
    settings = VectorStoreOptions(kind="server", uri=chroma_server, collection="rechunked")
    ingest([docs], tmp_path / "index", vector_store=settings)
    ingest([docs], tmp_path / "index", vector_store=settings, chunk_size=128, chunk_overlap=16)
    index = ChunkIndex.load(tmp_path / "index", settings)
    client = client_for(settings, tmp_path)
    names = sorted(c.name for c in client.list_collections() if c.name.startswith("rechunked-"))
    client.close()
    assert names == ["rechunked-1", "rechunked-2"] and index.vectors["collection"] == "rechunked-2"
    assert nearest(index, "roasted coffee")[0][0].startswith("Coffee")


def test_an_ingest_into_a_foreign_folder_is_still_refused(tmp_path: Path, docs: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("x")
    with pytest.raises(IngestError, match="folder of other things"):
        ingest([docs], tmp_path / "mine")


def test_crag_serve_opens_an_index_whose_vectors_are_on_a_server(
    chroma_server: str, docs: Path, tmp_path: Path
) -> None:
    """`crag serve` opens its index with `[vector_store]`, as `crag ask` does (it had opened it
    without, and refused the index as if no server were set)."""
    from crag import Settings
    from crag.app.server import build_server

    ingest([docs], tmp_path / "index", vector_store=VectorStoreOptions(kind="server", uri=chroma_server))
    settings = Settings.load(env={}, index={"path": tmp_path / "index"},
                             vector_store={"kind": "server", "uri": chroma_server},
                             server={"store": str(tmp_path / "server.db")})
    served = build_server(settings)
    assert served.runs.index is not None
    assert nearest(served.runs.index, "coffee")[0][0]  # its vectors, read from the server
