"""The field's three standard retrievers as a rules file: BM25, dense (WordLlama) and both fused.

    .venv/bin/python evaluate.py --rules field_rules.py --format table
    .venv/bin/python evaluate.py --cases locomo-cases.json --rules field_rules.py --format table --group kind

Each rule ranks the history's turns (their messages' texts, shapes.turn_texts, a newline between) against the
question, highest first, newer first on ties, and keeps each turn of that order that still fits, as `relevant` does:
`bm25` by BM25 over stemmed words (turns scoring above 0), `dense` by WordLlama's cosine similarity (every turn),
`fused` by reciprocal-rank fusion of the two (docs/rules.md). Indexes are cached per conversation, found by its
text. The model is read from the wordllama package's own folder with downloads disabled: nothing is fetched at run
time. The rules read no labels and write nothing.
"""
from functools import cached_property, lru_cache, partial
import logging
from pathlib import Path

import bm25s
import numpy
import Stemmer

from shapes import each_turn, per_history, turn_texts
from strategies import fitting, ranked

# wordllama's import calls logging.basicConfig, which would put every library's info lines on stderr; while
# the root logger has a handler, that call does nothing.
logging.getLogger().addHandler(PLACEHOLDER := logging.NullHandler())
import wordllama  # noqa: E402
logging.getLogger().removeHandler(PLACEHOLDER)
# bm25s sets its own logger to DEBUG: under any handler a caller sets up, every index built would print a line.
logging.getLogger('bm25s').setLevel(logging.WARNING)

# What is measured. Changing any of these changes the rules' rows.
STEMMER_LANGUAGE = 'english'  # PyStemmer's Snowball stemmer for BM25's words
BM25_STOP_WORDS = 'en'  # bm25s's English stop-word list
WORDLLAMA_CONFIG = 'l2_supercat'  # the model the wordllama wheel bundles ...
WORDLLAMA_DIM = 256  # ... at the one dimension whose weights it ships
RRF_K = 60  # reciprocal-rank fusion constant, the usual value
# Not measured, only how much each retriever keeps cached: conversations' indexes, and rankings of questions
CONVERSATIONS_KEPT = 32
QUESTIONS_KEPT = 2048  # reused by `fused` and across a sweep's budgets (LoCoMo's 1,534 fit, in about 40 MB)

STEMMER = Stemmer.Stemmer(STEMMER_LANGUAGE)  # one for the run: it keeps the words it has stemmed


class Turns(tuple):
    """A conversation as its turns' texts (shapes.turn_texts), the key of every cache here, its hash worked out once:
    a sweep looks up each question's ranking at every budget, and hashing hundreds of turns each time cost more."""

    @cached_property
    def known_hash(self) -> int:
        return tuple.__hash__(self)

    def __hash__(self) -> int:
        return self.known_hash


@per_history
def history_turns(history: list) -> Turns:
    """Turns of a history list, made once per list: the rules process hands each call the list the call before got
    while it equals the original, so the same key is found again, and compared by identity."""
    return Turns(each_turn(turn_texts, history))


def bm25_words(texts: list[str]) -> list[list[str]]:
    return bm25s.tokenize(texts, stopwords=BM25_STOP_WORDS, stemmer=STEMMER, return_ids=False, show_progress=False)


@lru_cache(maxsize=CONVERSATIONS_KEPT)
def bm25_index(turns: Turns):
    """A BM25 index of a conversation's turns; None when no turn has a word to index (bm25s cannot build one)."""
    words = bm25_words(['\n'.join(pair) for pair in turns])
    if not any(words):
        return None
    index = bm25s.BM25()
    index.index(words, show_progress=False)
    return index


@lru_cache(maxsize=QUESTIONS_KEPT)
def bm25_ranked(turns: Turns, current: str) -> list[int]:
    index = bm25_index(turns)
    query = bm25_words([current])[0]
    if index is None or not query:
        return []
    return ranked({turn: score for turn, score in enumerate(index.get_scores(query).tolist()) if score > 0})


@lru_cache(maxsize=1)
def model():
    """With its package folder as cache folder WordLlama finds its bundled tokenizer in tokenizers/ (it would
    otherwise look under a folder it does not ship and download it); a missing file raises, not downloads."""
    folder = Path(wordllama.__file__).resolve().parent
    return wordllama.WordLlama.load(config=WORDLLAMA_CONFIG, dim=WORDLLAMA_DIM, cache_dir=folder, disable_download=True)


@lru_cache(maxsize=CONVERSATIONS_KEPT)
def turn_vectors(turns: Turns) -> numpy.ndarray:
    return model().embed(['\n'.join(pair) for pair in turns], norm=True)


@lru_cache(maxsize=QUESTIONS_KEPT)
def dense_ranked(turns: Turns, current: str) -> list[int]:
    similarity = turn_vectors(turns) @ model().embed([current], norm=True)[0]
    return ranked(dict(enumerate(similarity.tolist())))


def fuse(rankings: list[list[int]], k: int = RRF_K) -> list[int]:
    """Reciprocal-rank fusion: by the sum of 1 / (k + rank) over the rankings holding a turn, newer first on ties.

    fuse([[3, 1], [1, 2]], k=60): turn 1 scores 1/62 + 1/61, turn 3 1/61, turn 2 1/62 -> [1, 3, 2]
    """
    score: dict[int, float] = {}
    for ranking in rankings:
        for rank, index in enumerate(ranking, 1):
            score[index] = score.get(index, 0.0) + 1 / (k + rank)
    return ranked(score)


@lru_cache(maxsize=QUESTIONS_KEPT)
def fused_ranked(turns: Turns, current: str) -> list[int]:
    return fuse([bm25_ranked(turns, current), dense_ranked(turns, current)])


def keep_in_order(case: dict, count, ranker) -> dict:
    """A rule, its ranker bound: the request with each turn that still fits, in the order ranker gives."""
    return fitting(case, count, ranker(history_turns(case['history']), case['current']))


RULES = {name: partial(keep_in_order, ranker=ranker) for name, ranker in (
    ('bm25', bm25_ranked), ('dense', dense_ranked), ('fused', fused_ranked))}

