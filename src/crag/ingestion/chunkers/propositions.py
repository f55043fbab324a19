"""The agentic chunker's offline method: propositions from sentences, grouped by their WordLlama
centroids, each group titled by its keywords and summarised by its most central proposition
(`crag.ingestion.chunkers.agentic` uses these, and falls back to them when a model's reply
cannot be used).

A proposition is a sentence, optionally with a leading pronoun resolved. Pronoun resolution is
on by default because it was measured to help retrieval (recall@5 of the gold passage rose on
every dev set, by a one-off probe: docs/measured.md, "What the one-off probes found"). A
sentence opening "He ..." says little on its own, so it joins (and is found by) the wrong chunk.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from crag.text import STOPWORDS, TermStats, sentences, terms

# --- propositions ----------------------------------------------------------------------------

_POSSESSIVES = {"his", "her", "its", "their"}
_SUBJECTS = {"he", "she", "it", "they"}
# "This" is a pronoun before a verb ("This led to ..."), a determiner before a noun ("This
# dynasty ..."): only the verbs most often seen there are taken to mark the pronoun.
_DEMONSTRATIVE_VERBS = {"is", "was", "has", "had", "became", "led", "made", "means", "meant", "caused", "allowed"}
_CONNECTORS = {"of", "de", "von", "van", "du", "la", "le", "da"}
# Capitalised openers that are not names (stopwords are not names either).
_OPENERS = {"although", "though", "however", "while", "when", "since", "because", "despite", "following",
            "similar", "similarly", "unlike", "like", "according", "later", "today", "also", "then", "thus"}
_INITIAL = re.compile(r"[A-Z]\.")


def resolve_pronouns(sents: Sequence[str], default_subject: str | None = None) -> list[str]:
    """`sents` with a leading he/she/it/they/this (his/her/its/their) replaced by the latest subject.

    The subject is the named entity a sentence opens with ("The Normans were ...", "Warsaw
    is ..."), or `default_subject` (the document's title) until one is seen. Gender and number
    are not checked: this is the simple resolution the offline chunker can afford.
    """
    common = {w for sentence in sents for w in re.findall(r"\b[a-z][\w'-]*", sentence)}
    subject = default_subject
    out = []
    for sentence in sents:
        first, _, rest = sentence.partition(" ")
        word = first.lower()
        next_word = rest.split(" ", 1)[0].lower() if rest else ""
        pronoun = word in _SUBJECTS or word in _POSSESSIVES or (
            word in {"this", "that"} and next_word in _DEMONSTRATIVE_VERBS
        )
        if subject and pronoun and rest:
            owner = (subject + ("'" if subject.endswith("s") else "'s")) if word in _POSSESSIVES else subject
            sentence = f"{owner} {rest}"
        elif found := _leading_subject(sentence, common):
            subject = found
        out.append(sentence)
    return out


def _leading_subject(sentence: str, common: set[str]) -> str | None:
    """The name a sentence opens with ("The Normans", "Jon C. Madonna", "Warsaw"), if any.

    Not a name: a phrase opening with a stopword or a connective ("In Summer", "Although Cox"),
    or a lone capitalised word written in lower case elsewhere in the document (`common`) or
    followed by a comma ("Later,").
    """
    tokens = sentence.split()
    start = 1 if tokens and tokens[0] == "The" else 0
    taken: list[str] = []
    ended_by = ""
    for token in tokens[start:]:
        word = token.rstrip(".,;:!?)\"'")
        if not (word[:1].isupper() or (taken and word in _CONNECTORS)):
            break
        taken.append(word if not _INITIAL.fullmatch(token) else token)
        if word != token and not _INITIAL.fullmatch(token):  # punctuation ends the name ("Jon C. Madonna" goes on)
            ended_by = token[len(word) :]
            break
    while taken and taken[-1] in _CONNECTORS:
        taken.pop()
    if not taken or (start == 0 and (taken[0].lower() in STOPWORDS or taken[0].lower() in _OPENERS)):
        return None  # "In Summer 1996, ...", "Although Cox ..."
    if start == 0 and len(taken) == 1 and (taken[0].lower() in common or ended_by.startswith(",")):
        return None
    return " ".join(tokens[:start] + taken)


def offline_propositions(text: str, title: str | None = None, *, resolve: bool = False) -> list[str]:
    """The sentences of `text` (bundled Punkt), with leading pronouns resolved if `resolve`."""
    sents = sentences(text)
    if not resolve:
        return sents
    subject = title if title and len(title.split()) <= 4 and ":" not in title else None
    return resolve_pronouns(sents, subject)


# --- grouping, titles and summaries ----------------------------------------------------------


def group_by_centroid(
    vectors: np.ndarray, sizes: Sequence[int], threshold: float, max_size: int
) -> list[list[int]]:
    """Greedy grouping in document order: each unit vector joins the chunk whose centroid is most
    similar (cosine), if at least `threshold` and its size stays within `max_size`; else it
    starts a new chunk. Returns each chunk's row numbers, in order."""
    n = len(vectors)
    sums = np.zeros_like(vectors, dtype=np.float32)
    centroids = np.zeros_like(sums)
    load = np.zeros(n, dtype=np.int64)
    groups: list[list[int]] = []
    for i in range(n):
        k = len(groups)
        best = -1
        if k:
            sims = centroids[:k] @ vectors[i]
            sims[load[:k] + sizes[i] > max_size] = -np.inf
            j = int(np.argmax(sims))
            best = j if sims[j] >= threshold else -1
        if best < 0:
            best = k
            groups.append([])
        groups[best].append(i)
        sums[best] += vectors[i]
        load[best] += sizes[i]
        norm = float(np.linalg.norm(sums[best]))
        centroids[best] = sums[best] / norm if norm else sums[best]
    return groups


_SURFACE = re.compile(r"[^\W\d_][\w'’\-]*", re.UNICODE)


@lru_cache(maxsize=65536)
def _stem(word: str) -> str | None:
    found = terms(word)
    return found[0] if len(found) == 1 else None


def keyword_title(texts: Sequence[str], stats: TermStats, count: int = 3) -> str:
    """The `count` words with the highest frequency x IDF in `texts`, spelt as most often there."""
    weight: Counter[str] = Counter()
    surface: dict[str, Counter[str]] = {}
    for text in texts:
        for word in _SURFACE.findall(text):
            word = word.split("'")[0].split("’")[0]
            stem = _stem(word)
            if stem:
                weight[stem] += 1
                surface.setdefault(stem, Counter())[word] += 1
    ranked = sorted(weight, key=lambda t: (-weight[t] * stats.idf(t), t))[:count]
    return ", ".join(surface[t].most_common(1)[0][0] for t in ranked)


def central(texts: Sequence[str], vectors: np.ndarray) -> str:
    """The text whose vector is closest to the group's centroid."""
    return texts[int(np.argmax(vectors @ vectors.sum(axis=0)))]
