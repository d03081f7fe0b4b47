"""The four rules for choosing which history goes into one request, as the README states them.

    from strategies import RULES; from tokenizer import counter
    RULES['notes'](case, counter())   # {'messages': [...], 'turns': [0, 4], 'notes': 2, 'input_tokens': 231}

    recent    walk back from the newest turn; stop at the first one that does not fit
    relevant  turns sharing words with the question, most shared words first (newer
              first on ties); skip any turn that does not fit
    notes     `recent` inside the allowance less a 64-token reserve, then one-line
              notes quoted from older turns that hold a cue word, newest first,
              until the first note that does not fit
    hybrid    the newest turn if it fits, then the rest as `relevant` orders them

A rule reads two figures from the counter (`costs`): the tokens of the bare request (system message
and question) and the tokens each turn adds to it. Every rule gets the same allowance
(context_limit - max_new_tokens - margin), never changes the case, never reads the `required` or `stale`
labels. The request it returns is counted whole, and a count that is not the sum of its parts is an error
(`chosen`). Any count function (messages -> int) works; the lab's counter also offers `turn_costs`,
so a case costs time in proportion to its history. It prints and writes nothing.
"""
from bisect import bisect_left
from functools import lru_cache
from itertools import islice
import re

from common import LabError
from shapes import allowance, build_request, escape, message_text, per_history, selection, turn_messages, turn_texts

# What is measured. Changing any of these (or shapes.NOTES_HEADER) changes the recorded report.
NOTES_RESERVE = 64  # tokens `notes` keeps free of recent turns, for the notes block
WORD = re.compile(r'[a-z0-9]+')  # a word, after lowercasing; no stemming
STOP_WORDS = frozenset(
    'a an and are as at be by did do does for from how in is it of on or that the this to was we '
    'what when where which who will with you our us'.split())
# A sentence holding one of these becomes a note; `limit` only ever matters to held-out cases.
CUES = re.compile(
    r'\b(decided|decide|chose|choose|will use|must|never|always|deadline|instead|switch(?:ed)?|requires?|limit)\b',
    re.IGNORECASE)
SENTENCE_BREAK = re.compile(r'(?<=[.!?])\s+')  # whitespace after ., ! or ?


@lru_cache(maxsize=1 << 16)  # a question's words are read once, not once per rule and budget
def words(text: str) -> frozenset[str]:
    """Content words of a text: words('Which database will we use?') -> frozenset({'database', 'use'})"""
    return frozenset(WORD.findall(text.lower())) - STOP_WORDS


def costs(case: dict, count) -> tuple[int, list[int]]:
    """(bare, each turn's) as above: count.turn_costs(history) if count has it, else count(with turn i) - bare."""
    bare = count(build_request(case, []))
    if hasattr(count, 'turn_costs'):
        return bare, count.turn_costs(case['history'])
    return bare, [count(build_request(case, [index])) - bare for index in range(len(case['history']))]


def fit(order: list[int], cost: list[int], room: int, stop_at_misfit: bool = False) -> tuple[list[int], int]:
    """Walk `order`, keeping each turn that fits in the room left: (the kept turns, the room left after them).

    fit([3, 2, 1, 0], cost=[1, 5, 2, 3], room=6) -> ([3, 2, 0], 0)       (turn 1 does not fit, turn 0 does)
    fit([3, 2, 1, 0], cost=[1, 5, 2, 3], room=6, stop_at_misfit=True) -> ([3, 2], 1)
    """
    kept = []
    for index in order:
        if cost[index] <= room:
            kept.append(index)
            room -= cost[index]
        elif stop_at_misfit:
            break
    return kept, room


def fitting(case: dict, count, order, stop_at_misfit: bool = False) -> dict:
    """The request with each turn of `order` that fits (`fit`) in the allowance left after the bare request."""
    parts = costs(case, count)
    return chosen(case, count, fit(order, parts[1], allowance(case) - parts[0], stop_at_misfit)[0], parts=parts)


def ranked(scores: dict[int, float]) -> list[int]:
    """Highest score first, newer turn first on ties: ranked({0: 0.5, 2: 0.5, 3: 0.2}) -> [2, 0, 3]"""
    return [index for _, index in sorted(zip(scores.values(), scores), reverse=True)]  # pairs compared in C


def by_overlap(case: dict, before: int) -> list[int]:
    """Turns [0, before) sharing at least one word with the question: most shared first, newer first on ties; worked
    out once per question, whatever the budget (a sweep asks at each). Fewer than all turns are the order of all
    without the rest (hybrid's): taking turns out of a sorted list leaves the others sorted."""
    known, every = rankings(case['history']), len(case['history'])
    if (order := known.get(key := (case['current'], before))) is None:
        if before < every:
            order = known[key] = [index for index in by_overlap(case, every) if index < before]
        else:
            asked = words(case['current'])
            order = known[key] = ranked({index: shared for index, turn in enumerate(turn_words(case['history']))
                                         if (shared := len(asked & turn))})
    return order


@per_history
def rankings(history: list) -> dict[tuple[str, int], list[int]]:
    """A conversation's by_overlap orders found so far: (question, before) -> turns."""
    return {}


@per_history
def turn_words(history: list) -> list[frozenset[str]]:
    """Each turn's content words (its messages' texts, a space between), worked out once per conversation."""
    return [words(' '.join(turn_texts(turn))) for turn in history]


@lru_cache(maxsize=1 << 16)  # all_note_lines reads a conversation once; this, for one it let go and meets again
def cue_sentences(text: str) -> tuple[str, ...]:  # 'Fine. We must ship.' -> ('We must ship.',), escaped, once each
    sentences = SENTENCE_BREAK.split(text.strip()) if CUES.search(text) else []
    return tuple(dict.fromkeys(escape(sentence) for sentence in sentences if CUES.search(sentence)))


def note_lines(case: dict, before: int):
    """Cue-word sentences from turns [0, before), newest first, each labelled with its turn and role:
    a user turn 'Fine. We must ship on Friday.' at index 0 gives '- [turn 1, user] We must ship on Friday.'"""
    turns, lines = all_note_lines(case['history'])
    return islice(lines, bisect_left(turns, 1 - before), None)


@per_history
def all_note_lines(history: list) -> tuple[list[int], list[str]]:
    """note_lines(case, len(history)), worked out once per conversation, and minus each line's turn index (ascending,
    so that the lines of turns before any index are found by bisection)."""
    found = [(-index, f'- [turn {index + 1}, {message["role"]}] {sentence}')
             for index in reversed(range(len(history)))
             for message in reversed(turn_messages(history[index]))  # newest first: a pair's assistant, its user
             for sentence in reversed(cue_sentences(message_text(message)))]
    return [turn for turn, _ in found], [line for _, line in found]


def chosen(case: dict, count, kept: list[int], notes: list[str] = (), parts: tuple | None = None,
           head: int | None = None) -> dict:
    """What every rule returns (shapes.selection), its size counted whole and checked against its parts: `costs` and
    the count of the bare request with the notes block (`head`), which a caller that has them passes, so that no
    request is counted twice (an agent request is rendered whole)."""
    bare, cost = parts or costs(case, count)
    request, size = built(case, count, kept, notes)
    if head is None:  # the bare request, with the notes block if any
        head = count(build_request(case, [], notes)) if notes else bare
    check_additive(case, size, head + sum(map(cost.__getitem__, kept)))
    return selection(request, kept, len(notes), size)


def check_additive(case: dict, whole: int, parts: int) -> None:
    """Refuse a request counted whole to other than the sum of the parts a rule or search decided by."""
    if whole != parts:
        raise LabError(f'case {case["id"]}: the request was counted {parts} tokens as it was built and '
                       f'{whole} whole; the counter cannot be summed turn by turn')


def built(case: dict, count, kept: list[int], notes: list[str] = ()) -> tuple[list[dict], int]:
    """(build_request(case, kept, notes), its count): from what it is built of where `count` offers count_built."""
    request = build_request(case, kept, notes)
    return request, count.count_built(request, case, kept, notes) if hasattr(count, 'count_built') else count(request)


def recent(case: dict, count) -> dict:
    return fitting(case, count, reversed(range(len(case['history']))), stop_at_misfit=True)


def relevant(case: dict, count) -> dict:
    return fitting(case, count, by_overlap(case, len(case['history'])))


def notes(case: dict, count) -> dict:
    bare, cost = parts = costs(case, count)
    kept, _ = fit(reversed(range(len(cost))), cost, allowance(case) - NOTES_RESERVE - bare, stop_at_misfit=True)
    turns, lines, head = sum(map(cost.__getitem__, kept)), [], bare
    counted = getattr(count, 'notes_head', None) or (lambda case, notes: count(build_request(case, [], notes)))
    for line in note_lines(case, len(cost) - len(kept)):  # each note goes first in the block
        if turns + (size := counted(case, [line, *lines])) > allowance(case):
            break
        lines.insert(0, line)
        head = size
    return chosen(case, count, kept, lines, parts, head)


def hybrid(case: dict, count) -> dict:  # the newest turn, if there is one, then the others by overlap
    newest = range(len(case['history']))[-1:]
    return fitting(case, count, [*newest, *by_overlap(case, len(case['history']) - 1)])


RULES = {'recent': recent, 'relevant': relevant, 'notes': notes, 'hybrid': hybrid}
