"""The `local_search` tool: hybrid retrieval over a folder of documents (faiss dense + BM25).

Documents are `.txt`, `.md` and `.jsonl` files (one JSON object a line with `text` and optional
`id` / `title`) anywhere under the folder (hidden files and folders are skipped), or an in-memory
list of `Document`s (e.g. database records). They are cut into overlapping character windows,
embedded with an `Embedder` (unit-norm vectors; a document's title, when it has one, is prepended
to each of its chunks) and put in an exact inner-product faiss index, so scores are cosine
similarities. A BM25 index over the same chunks (`bm25s`; the title with the first chunk only)
scores them by the query's words, and the two scores are fused (`fuse_scores`): a sentence
embedding of a random record id such as 'WIIHWKB1Z3' barely tells it from other ids, so dense
retrieval alone put the record a question names first for about half of the demo's lookups, while
the id is one rare word to BM25.

The dense index is built once and cached under `cache_dir/<fingerprint>/` (`index.faiss`, `chunks.json`,
`meta.json`, moved into place as one folder so a crash never leaves a half-written cache). The
fingerprint hashes every document's id, title, source and text plus the chunking settings and the
embedder identity: a matching cache is reloaded without embedding anything; any change to the
documents, chunking or model builds a new one, and older entries for the same corpus are removed.

Departure from the paper: ToolOrchestra's local search serves a Wikipedia-scale corpus with a
dedicated retriever service; here the corpus is whatever folder the configuration names and the
index is an exact `IndexFlatIP` (fine up to a few hundred thousand chunks on CPU).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import shutil
from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from toolorchestra.core.errors import ConfigError
from toolorchestra.core.fs import atomic_write_json, staged_dir
from toolorchestra.tools.base import Tool, ToolError, ToolOutput
from toolorchestra.tools.embeddings import (
    Embedder,
    EmbedderConfig,
    EmbeddingError,
    LocalEmbedderConfig,
    build_embedder,
)

log = logging.getLogger(__name__)

INDEX_FORMAT = 1
"""Bump when the cache layout or chunking algorithm changes, so old caches are not reused."""
DOC_SUFFIXES = (".txt", ".md", ".jsonl")
MAX_TOP_K = 20
DENSE_WEIGHT = 0.5
"""The embedding's share of a fused score (BM25's is the rest); see `fuse_scores`."""
FUSION_EXACT = 20_000
"""Up to this many chunks, both retrievers score every chunk (an exact faiss search computes every
inner product anyway), so the fusion's normalisation sees the whole corpus."""
FUSION_POOL = 100
"""Above `FUSION_EXACT`: candidates each retriever contributes (at least 10 x top_k). A chunk
only BM25 found then has the lowest normalised cosine of the pool, so it needs a clear lead in
BM25 to win."""


class Document(BaseModel):
    """One searchable document."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    text: str
    title: str | None = None
    source: str
    """Where it came from (a relative file path, `file.jsonl:LINE`, or a record path)."""

    @field_validator("id", mode="before")
    @classmethod
    def _id_to_str(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class Chunk(BaseModel):
    doc_id: str
    source: str
    title: str | None
    chunk_index: int
    start: int
    """Character offset of the chunk in its document's text."""
    text: str


class Hit(BaseModel):
    rank: int
    """Its place by the fused score (by the cosine when lexical matching is off)."""
    score: float
    """Cosine similarity of the query and the chunk."""
    doc_id: str
    source: str
    title: str | None
    chunk_index: int
    text: str


class ChunkingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    chunk_chars: int = Field(default=800, ge=50)
    chunk_overlap: int = Field(default=100, ge=0)

    @model_validator(mode="after")
    def _overlap_below_half(self) -> ChunkingConfig:
        if self.chunk_overlap * 2 >= self.chunk_chars:
            raise ValueError(
                f"chunk_overlap ({self.chunk_overlap}) must be less than half of chunk_chars "
                f"({self.chunk_chars}): lower chunk_overlap or raise chunk_chars"
            )
        return self


class LocalSearchConfig(ChunkingConfig):
    docs_dir: Path
    cache_dir: Path
    embedder: EmbedderConfig = Field(default_factory=LocalEmbedderConfig)
    max_passage_chars: int = Field(default=1000, ge=50)
    """Longest passage text shown in one observation entry."""
    lexical: bool = True
    """Fuse BM25's ranking with the embedding's (False: dense retrieval only)."""

    @property
    def chunking(self) -> ChunkingConfig:
        return ChunkingConfig(chunk_chars=self.chunk_chars, chunk_overlap=self.chunk_overlap)


# --- documents -------------------------------------------------------------------------------


def chunk_text(text: str, chunk_chars: int, overlap: int) -> list[tuple[int, str]]:
    """Cut `text` into windows of at most `chunk_chars` characters, neighbours sharing at most
    `overlap` characters; returns (start offset, stripped text) pairs, empty windows dropped.

    A window ends at the last whitespace in its second half when there is one, and the next one
    starts at a word start, so words are split only when a single word fills half a window.

    >>> chunk_text("one two three four five six seven", chunk_chars=16, overlap=6)
    [(0, 'one two three'), (8, 'three four five'), (19, 'five six seven')]
    """
    pieces: list[tuple[int, str]] = []
    start, n = 0, len(text)
    while start < n:
        end = min(start + chunk_chars, n)
        if end < n:
            for cut in range(end, start + chunk_chars // 2, -1):
                if text[cut - 1].isspace():
                    end = cut
                    break
        piece = text[start:end].strip()
        if piece:
            pieces.append((start, piece))
        if end >= n:
            break
        start = _next_start(text, start, end, overlap)
    return pieces


def _next_start(text: str, start: int, end: int, overlap: int) -> int:
    """Where the window after [start, end) begins: `overlap` characters back from `end`, moved
    forward to the next word start so no chunk opens mid-word (the overlap may shrink)."""
    nxt = max(end - overlap, start + 1)
    if text[nxt - 1].isspace():
        return nxt
    for pos in range(nxt, end):
        if text[pos].isspace():
            return pos + 1
    return nxt


def _markdown_title(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip() or None
        if line.strip():
            return None  # only a heading on the first non-blank line counts as the title
    return None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        reason = f"not UTF-8 text ({exc.reason} at byte {exc.start}); re-save it as UTF-8"
        raise ConfigError(path, reason) from exc


def _jsonl_documents(path: Path, rel: str) -> Iterable[Document]:
    for lineno, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(path, f"invalid JSON ({exc.msg}, column {exc.colno})", key=where) from exc
        if not isinstance(row, dict):
            raise ConfigError(path, f"expected a JSON object, got {type(row).__name__}", key=where)
        text = row.get("text")
        if not isinstance(text, str):
            raise ConfigError(path, "every line needs a string field `text`", key=f"{where}: text")
        title = row.get("title")
        if title is not None and not isinstance(title, str):
            raise ConfigError(path, "`title` must be a string when present", key=f"{where}: title")
        doc_id = row.get("id", f"{rel}:{lineno}")
        if not isinstance(doc_id, str | int) or isinstance(doc_id, bool):
            raise ConfigError(path, "`id` must be a string or an integer", key=f"{where}: id")
        yield Document(id=doc_id, text=text, title=title, source=f"{rel}:{lineno}")


def load_documents(docs_dir: str | Path) -> list[Document]:
    """Every document under `docs_dir`, in path order (so fingerprints are stable)."""
    root = Path(docs_dir)
    if not root.is_dir():
        raise ConfigError(root, "the local-search documents folder does not exist; create it or fix docs_dir")
    docs: list[Document] = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.suffix.lower() not in DOC_SUFFIXES or not path.is_file():
            continue
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        if path.suffix.lower() == ".jsonl":
            docs.extend(_jsonl_documents(path, rel))
        else:
            text = _read_text(path)
            title = _markdown_title(text) if path.suffix.lower() == ".md" else None
            docs.append(Document(id=rel, text=text, title=title or path.stem, source=rel))
    return docs


def fingerprint(documents: Sequence[Document], embedder_identity: str, chunking: ChunkingConfig) -> str:
    """sha256 over the documents' content, the chunking settings and the embedder identity."""
    digest = hashlib.sha256()
    header = {"format": INDEX_FORMAT, "embedder": embedder_identity, **chunking.model_dump()}
    digest.update(json.dumps(header, sort_keys=True).encode())
    for doc in documents:
        # Length-prefixed fields, so ("ab","c") and ("a","bc") hash differently.
        for field in (doc.id, doc.title or "", doc.source, doc.text):
            raw = field.encode("utf-8")
            digest.update(len(raw).to_bytes(8, "little"))
            digest.update(raw)
    return digest.hexdigest()


# --- index -------------------------------------------------------------------------------------


def fuse_scores(dense: dict[int, float], lexical: dict[int, float], dense_weight: float = DENSE_WEIGHT) -> list[int]:
    """A convex combination of the two retrievers' scores (Bruch et al. 2023 found it beats
    reciprocal rank fusion): cosines min-max normalised over the candidates, BM25 scores divided by
    the best (BM25's zero is "no word in common"; `lexical` leaves those chunks out). Best first,
    ties in `dense` order.

    >>> fuse_scores({1: 0.9, 2: 0.8, 3: 0.7, 4: 0.5}, {3: 9.0, 2: 1.0})
    [3, 1, 2, 4]
    """
    low, high = (min(dense.values()), max(dense.values())) if dense else (0.0, 0.0)
    best = max(lexical.values(), default=0.0)
    order = list(dict.fromkeys([*dense, *lexical]))

    def fused(i: int) -> float:
        d = (dense.get(i, low) - low) / (high - low) if high > low else 1.0
        return dense_weight * d + (1 - dense_weight) * (lexical.get(i, 0.0) / best if best > 0 else 0.0)

    scores = {i: fused(i) for i in order}
    return sorted(order, key=lambda i: -scores[i])


class LexicalIndex:
    """BM25 over the chunks' titles and texts (`bm25s`, English stop words removed)."""

    def __init__(self, texts: Sequence[str]) -> None:
        import bm25s

        self.tokenizer = bm25s.tokenization.Tokenizer(stopwords="en")
        self.retriever = bm25s.BM25()
        self.retriever.index(self.tokenizer.tokenize(list(texts), show_progress=False), show_progress=False)
        self.size = len(texts)

    def search(self, query: str, n: int) -> dict[int, float]:
        """BM25 scores of up to `n` chunks that share a word with `query`, best first."""
        tokens = self.tokenizer.tokenize([query], update_vocab=False, show_progress=False)
        ids, scores = self.retriever.retrieve(tokens, k=min(n, self.size), show_progress=False)
        return {int(i): float(v) for i, v in zip(ids[0].tolist(), scores[0].tolist(), strict=True) if v > 0}


def _embedding_text(chunk: Chunk) -> str:
    """What the embedding reads for `chunk`: its document's title (a record's kind and id), then its text."""
    return chunk.text if not chunk.title else f"{chunk.title}\n{chunk.text}"


def _lexical_text(chunk: Chunk) -> str:
    """What BM25 scores for `chunk`: the document's title counts once, with the first chunk. On
    every chunk, a query matching only the title (a record's id) matched all of the document's
    chunks alike, and BM25's length normalisation put the short last one first: a 923-character
    restaurant ticket's tail (its charges) instead of its head (the fields lookups ask for)."""
    return f"{chunk.title}\n{chunk.text}" if chunk.title and chunk.chunk_index == 0 else chunk.text


class SearchIndex:
    """Chunks, their faiss index, and the embedder that made it (also used for queries)."""

    def __init__(self, index: Any, chunks: list[Chunk], embedder: Embedder, *, built: bool) -> None:
        if index.ntotal != len(chunks):
            raise ValueError(f"index holds {index.ntotal} vectors but there are {len(chunks)} chunks")
        self.index = index
        self.chunks = chunks
        self.embedder = embedder
        self.built = built
        """True when this instance embedded the documents, False when it came from the cache."""

    @cached_property
    def lexical(self) -> LexicalIndex:
        """The BM25 index of the chunks, built at the first search that uses it (a dense-only
        tool never pays for it)."""
        return LexicalIndex([_lexical_text(c) for c in self.chunks])

    @classmethod
    def build(
        cls, documents: Sequence[Document], embedder: Embedder, chunking: ChunkingConfig
    ) -> SearchIndex:
        import faiss

        size, overlap = chunking.chunk_chars, chunking.chunk_overlap
        chunks = [
            Chunk(doc_id=doc.id, source=doc.source, title=doc.title, chunk_index=i, start=start, text=piece)
            for doc in documents
            for i, (start, piece) in enumerate(chunk_text(doc.text, size, overlap))
        ]
        if not chunks:
            raise ToolError("local search has no documents to index: every document is empty")
        vectors = embedder.embed([_embedding_text(c) for c in chunks])
        index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(vectors)
        return cls(index, chunks, embedder, built=True)

    def save(self, folder: Path, meta: dict[str, Any]) -> None:
        import faiss

        with staged_dir(folder) as tmp:
            faiss.write_index(self.index, str(tmp / "index.faiss"))
            atomic_write_json(tmp / "chunks.json", [c.model_dump() for c in self.chunks], indent=None)
            atomic_write_json(tmp / "meta.json", {**meta, "dim": self.index.d, "n_chunks": len(self.chunks)})

    @classmethod
    def load(cls, folder: Path, embedder: Embedder, expected_fingerprint: str) -> SearchIndex | None:
        """The cached index in `folder`, or None when it is missing, stale or unreadable."""
        import faiss

        meta_path = folder / "meta.json"
        if not meta_path.is_file():
            return None
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            if meta.get("fingerprint") != expected_fingerprint:
                return None
            index = faiss.read_index(str(folder / "index.faiss"))
            rows = json.loads((folder / "chunks.json").read_text(encoding="utf-8"))
            chunks = [Chunk.model_validate(row) for row in rows]
            if index.d != meta["dim"] or len(chunks) != meta["n_chunks"]:
                raise ValueError("meta.json disagrees with the index files")
            return cls(index, chunks, embedder, built=False)
        except (OSError, RuntimeError, ValueError, KeyError, TypeError, AttributeError) as exc:
            # A damaged cache is only a lost speed-up: say so and rebuild.
            log.warning("ignoring unreadable local-search cache %s (%s); rebuilding", folder, exc)
            return None

    @classmethod
    def build_or_load(
        cls,
        documents: Sequence[Document],
        embedder: Embedder,
        chunking: ChunkingConfig,
        *,
        cache_dir: str | Path | None,
        corpus: str,
    ) -> SearchIndex:
        """Reuse the cached index for exactly these documents and settings, or build and cache it.

        `corpus` names the collection (e.g. the documents folder); after a rebuild, cache entries
        of the same corpus with another fingerprint are deleted.
        """
        if not documents:
            raise ToolError(f"local search has no documents to index in {corpus} (.txt, .md or .jsonl files)")
        if cache_dir is None:
            return cls.build(documents, embedder, chunking)
        cache_dir = Path(cache_dir)
        fp = fingerprint(documents, embedder.identity, chunking)
        folder = cache_dir / fp[:24]
        cached = cls.load(folder, embedder, fp)
        if cached is not None:
            log.info("local search: reusing cached index %s (%d chunks)", folder, len(cached.chunks))
            return cached
        built = cls.build(documents, embedder, chunking)
        meta = {"format": INDEX_FORMAT, "fingerprint": fp, "embedder": embedder.identity, "corpus": corpus,
                "n_documents": len(documents), **chunking.model_dump()}
        built.save(folder, meta)
        _prune_stale(cache_dir, corpus, keep=folder)
        log.info("local search: built index %s (%d chunks)", folder, len(built.chunks))
        return built

    def search(self, query: str, top_k: int, *, lexical: bool = True, scope: str | None = None) -> list[Hit]:
        """The `top_k` best chunks for `query`: the dense and (with `lexical`) BM25 scores fused;
        `scope`: only documents whose id starts with `<scope>/`."""
        vector = self.embedder.embed([query])
        if vector.shape[1] != self.index.d:
            raise ToolError(
                f"query embedding has {vector.shape[1]} dimensions but the index has {self.index.d}: "
                "the index was built with another embedding model; delete the cache folder"
            )
        if not lexical and scope is None:
            pool = top_k
        elif len(self.chunks) <= FUSION_EXACT:  # every chunk: no candidate is cut off at a pool's edge
            pool = len(self.chunks)
        elif scope is None:
            pool = max(top_k * 10, FUSION_POOL)
        else:  # exact search over enough chunks to find top_k inside the scope
            pool = max(top_k * 50, 1000)
        scores, ids = self.index.search(vector, min(pool, len(self.chunks)))
        # faiss pads with -1 when fewer results exist
        cosine = {idx: score for score, idx in zip(scores[0].tolist(), ids[0].tolist(), strict=True) if idx >= 0}
        words = self.lexical.search(query, pool) if lexical else {}
        if scope is not None:
            prefix = f"{scope}/"
            cosine, words = ({i: v for i, v in found.items() if self.chunks[i].doc_id.startswith(prefix)}
                             for found in (cosine, words))
        for idx in words.keys() - cosine.keys():  # found by its words alone: its cosine all the same
            cosine[idx] = float(self.index.reconstruct(idx) @ vector[0])
        hits = []
        for idx in fuse_scores(cosine, words)[:top_k]:
            chunk, score = self.chunks[idx], cosine[idx]
            hits.append(Hit(rank=len(hits) + 1, score=float(score), doc_id=chunk.doc_id, source=chunk.source,
                            title=chunk.title, chunk_index=chunk.chunk_index, text=chunk.text))
        return hits


def _prune_stale(cache_dir: Path, corpus: str, keep: Path) -> None:
    for entry in cache_dir.iterdir():
        if entry == keep or not entry.is_dir() or entry.name.startswith("."):
            continue
        try:
            meta = json.loads((entry / "meta.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not one of ours, or being written: leave it alone
        if isinstance(meta, dict) and meta.get("corpus") == corpus and meta.get("format") is not None:
            shutil.rmtree(entry, ignore_errors=True)


# --- the tool ----------------------------------------------------------------------------------


class LocalSearch(Tool):
    """Search over a local document collection, by meaning and by words."""
    deterministic = True  # a fixed index

    name = "local_search"
    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1,
                      "description": "What to look for, in natural language."},
            "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K, "default": 5,
                      "description": "How many passages to return."},
        },
        "required": ["query"],
        "additionalProperties": False,
    }

    def __init__(
        self, index: SearchIndex, *, description: str | None = None, max_passage_chars: int = 1000,
        scope: str | None = None, lexical: bool = True,
    ) -> None:
        self.index = index
        self.max_passage_chars = max_passage_chars
        self.lexical = lexical
        self.scope = scope
        """Only documents whose id starts with `<scope>/` (a domain's records), when set."""
        self.description = description or (
            "Search the local document collection by meaning and by exact words (ids, names). Returns "
            "the most relevant passages with their source and a similarity score."
        )

    @classmethod
    def from_config(cls, config: LocalSearchConfig, embedder: Embedder | None = None) -> LocalSearch:
        embedder = embedder or build_embedder(config.embedder)
        return cls.from_folder(config.docs_dir, embedder=embedder, cache_dir=config.cache_dir,
                               chunking=config.chunking, max_passage_chars=config.max_passage_chars,
                               lexical=config.lexical)

    @classmethod
    def from_folder(cls, docs_dir: str | Path, *, embedder: Embedder, cache_dir: str | Path | None,
                    chunking: ChunkingConfig | None = None, **kwargs: Any) -> LocalSearch:
        documents = load_documents(docs_dir)
        corpus = f"folder:{Path(docs_dir).resolve()}"
        index = SearchIndex.build_or_load(documents, embedder, chunking or ChunkingConfig(),
                                          cache_dir=cache_dir, corpus=corpus)
        return cls(index, **kwargs)

    @classmethod
    def from_documents(cls, documents: Sequence[Document | dict[str, Any]], *, embedder: Embedder,
                       cache_dir: str | Path | None = None, corpus: str = "memory",
                       chunking: ChunkingConfig | None = None, **kwargs: Any) -> LocalSearch:
        """Index in-memory documents (e.g. database records rendered as text)."""
        docs = [d if isinstance(d, Document) else Document.model_validate(d) for d in documents]
        index = SearchIndex.build_or_load(docs, embedder, chunking or ChunkingConfig(),
                                          cache_dir=cache_dir, corpus=f"memory:{corpus}")
        return cls(index, **kwargs)

    def scoped(self, scope: str | None) -> LocalSearch:
        """The same index, searching only `scope`'s documents (ids `<scope>/...`, as
        `records_as_documents` writes them), so a question about one domain never retrieves
        another's records. `None`: the whole collection."""
        view = copy.copy(self)
        view.scope = scope
        return view

    def run(self, arguments: dict[str, Any]) -> ToolOutput:
        query = arguments.get("query")
        top_k = arguments.get("top_k", 5)
        if not isinstance(query, str) or not query.strip():
            raise ToolError("local_search needs a non-empty string argument `query`")
        if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K:
            raise ToolError(
                f"local_search argument `top_k` must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}"
            )
        try:
            hits = self.index.search(query.strip(), top_k, lexical=self.lexical, scope=self.scope)
        except EmbeddingError as exc:
            raise ToolError(f"local search could not embed the query: {exc}") from exc
        return ToolOutput(content=self._render(query, hits), data=[h.model_dump() for h in hits])

    def _render(self, query: str, hits: list[Hit]) -> str:
        if not hits:
            return f"No passages found for {query!r}."
        lines = [f"Top {len(hits)} passages:"]  # the query is in the call: no echo, observations are truncated
        for hit in hits:
            text = hit.text
            if len(text) > self.max_passage_chars:
                text = text[: self.max_passage_chars].rstrip() + " ..."
            title = f" | title: {hit.title}" if hit.title else ""
            lines.append(f"[{hit.rank}] source: {hit.source}{title} | score: {hit.score:.3f}\n{text}")
        return "\n\n".join(lines)
