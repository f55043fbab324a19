"""The settings of the ingest: how documents are read and chunked (`[ingest]`, `[index]`), and where
chunk vectors are searched (`[vector_store]`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, PrivateAttr, SecretStr, field_validator, model_validator

from crag.config.section import Section
from crag.errors import ConfigError


class IndexSettings(Section):
    path: Path = Path(".crag/index")
    chunk_size: int = Field(256, gt=16, description="Tokens per chunk.")
    chunk_overlap: int = Field(32, ge=0)
    chunker: Literal["sentence", "sentence_window", "agentic"] = Field(
        "sentence",
        description="sentence: token-budget chunks; sentence_window: one node per sentence with "
        "its neighbours in metadata (pair with the sentence_window postprocessor); agentic: "
        "propositions grouped into titled, summarized chunks.",
    )
    window_size: int = Field(3, ge=0, description="Sentences either side kept by the sentence_window chunker.")
    summaries: bool = Field(False, description="Write a summary per document (retriever kind 'summary').")
    agentic_threshold: float = Field(
        0.2, ge=-1.0, le=1.0,
        description="Agentic chunker, offline: a proposition joins the chunk whose centroid is most similar "
        "(cosine) when at least this similar, else starts a new chunk; higher gives more, smaller chunks.",
    )
    agentic_pronouns: bool = Field(
        True, description="Agentic chunker, offline: replace a sentence's leading pronoun with the latest subject."
    )

    @model_validator(mode="after")
    def _overlap_fits(self) -> IndexSettings:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(
                f"index.chunk_overlap ({self.chunk_overlap}) must be smaller than index.chunk_size ({self.chunk_size})"
            )
        return self


class VectorStoreSettings(Section):
    """Where chunk vectors are searched: the index's own embeddings, or a Chroma server."""

    kind: Literal["embedded", "server"] = Field(
        "embedded",
        description="embedded: exact search over the index's embeddings, no server; "
        "server: a Chroma server at uri (pip install 'crag-workflows[chroma]').",
    )
    uri: str | None = Field(None, description="Chroma server URL for kind 'server', e.g. http://host:8000.")
    token: SecretStr | None = Field(None, description="Bearer token for the server, if it asks for one.")
    collection: str = Field("crag", description="Collection name prefix on the server; one per index.")


class IngestSettings(Section):
    """`crag ingest`: readers for more file types, which links it follows, and the limits on
    reading one file (a file past one is skipped with its reason; the ingest goes on)."""

    symlinks: Literal["skip", "inside"] = Field(
        "skip",
        description="Links met inside a folder being ingested: skip (each named on one line), or "
        "inside: follow those whose target lies inside that folder. A path you name yourself is read.",
    )
    max_file_mb: float = Field(256.0, gt=0, description="Largest file read, as it lies on disk.")
    max_unpacked_mb: float = Field(
        200.0, gt=0, description="Bytes unpacked from one .docx, .epub or .pptx (its members together), counted as they stream."
    )
    max_text_mb: float = Field(32.0, gt=0, description="Text taken from one file, or one record of a .jsonl, .csv or .tsv (millions of characters).")
    max_seconds: float = Field(120.0, gt=0, description="Time one file's reader may take, OCR included; past it the reader is stopped.")
    max_memory_mb: float = Field(
        512.0, gt=0, description="Memory one file's reader may take, beyond what its process starts with."
    )
    max_ocr_pages: int = Field(
        500, gt=0, description="Scanned pages read by OCR in one file (the ocr extra), all within the "
        "file's ingest.max_seconds. A file with more is left out.",
    )

    readers: dict[str, str] = Field(
        default_factory=dict,
        description='Suffix -> "module:function" of a reader for it, e.g. { ".log" = "mypkg.logs:read" }: '
        "the function takes a file's Path and returns or yields Documents or text.",
    )

    @field_validator("readers")
    @classmethod
    def _reader_paths(cls, readers: dict[str, str]) -> dict[str, str]:
        for suffix, target in readers.items():
            if not suffix.startswith(".") or len(suffix) < 2 or "/" in suffix:
                raise ValueError(f"{suffix!r} is not a file suffix; write it as \".log\"")
            module, _, name = target.partition(":")
            if not module or not name:
                raise ValueError(f"{suffix} = {target!r}: write the reader as \"module:function\"")
        return {suffix.lower(): target for suffix, target in readers.items()}

    # The crag.toml that `Settings.load` found on its own (the working directory's) when it is
    # what named `readers`; None when they are the user's own (given in code, or by a file named
    # with --config) or allowed. Private, so no settings file can set it.
    _readers_found_in: Path | None = PrivateAttr(None)

    def readers_found_in(self, file: Path | None) -> None:
        """Record that `file`, a crag.toml found rather than given, named `readers` (None: allow them)."""
        self._readers_found_in = file

    def readers_to_run(self) -> dict[str, str]:
        """`readers`, which crag imports and runs: a `ConfigError` instead when a crag.toml crag
        found on its own named them, for that file may have come with the documents (a cloned
        folder's), and a reader is code."""
        found = self._readers_found_in
        if found is None or not self.readers:
            return self.readers
        named = ", ".join(f'"{suffix}" = "{target}"' for suffix, target in self.readers.items())
        raise ConfigError(
            f"{found} names readers ({named}), code that crag would run, and it was found in the working "
            "directory, not given: it may have come with the documents, so they are not run. If the file "
            f"is yours, name it (crag --config {found} ingest ...), or pass crag ingest --allow-readers, "
            "or set CRAG_ALLOW_READERS=1."
        )
