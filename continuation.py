"""Continuation cases: their status keys checked against the source, and four summary generations graded from the
recording (issue 42 §3, §4).

    .venv/bin/python continuation.py                 # the generation table, replayed from summary-recording.json
    .venv/bin/python continuation.py --cases FILE --keys FILE

continuation-cases.json holds 12 coding-agent sessions (agent cases, docs/agents.md); continuation-keys.json gives
each its five segments (the turn count at the end of each) and its status keys: {"kind": rejected, pending, unrun or
open, "subject", "kept": [regex], "reversed": [regex]}. A request's status is reversed if any reversed pattern
matches its text (case ignored), kept if a kept one does and no reversed one, dropped otherwise. On load the whole
history must read as kept and not reversed, or the key is refused. The history arrives in segments: at segments 2-5
summaries.compact summarises the previous generation's summary with the turns it now removes (after a fallback, the
previous summary and the turns since it). Each generation's request is graded: required identifiers by exact text
(scorer.facts_in, a summary's quoted form too), statuses, identifier-shaped strings the summary holds that the history
does not (fabricated), summary tokens and growth against generation 1. It prints; it writes nothing.
"""
import argparse
from pathlib import Path
import re

import common
from common import LabError
from case_set import load_cases
import lab_files
from lab_files import ANY, TEXT, check_fields, list_of, one_of
from scorer import facts_in
from shapes import message_text, turn_texts
from summaries import OUTCOMES, compact, load, recording_path, replaying
from text import markdown_table

CASES = common.HERE / 'continuation-cases.json'
KEYS = common.HERE / 'continuation-keys.json'
# What is measured. Changing any of these changes the generation table.
KINDS = ('rejected', 'pending', 'unrun', 'open')  # a status key's kinds
SEGMENTS = 5  # a history arrives in this many segments: one whole request, then a summary generation at each other
# Identifier shapes, for fabrication: a path (a slash, or a file name with an extension), a ticket (APPROVAL-318),
# a flag (--fresh), a number of three or more digits, a snake_case name (lru_cache).
IDENTIFIER = re.compile(r'(?:[\w.@-]+/)+[\w.@-]*\w|\b[\w-]+\.(?:py|sql|toml|md|json|sh|conf|txt|ya?ml|js|ts)\b'
                        r'|\b[A-Z]{2,}-\d+\b|(?<![\w-])--[a-z][\w-]*|\b\d{3,}\b|\b[a-z]+(?:_[a-z0-9]+)+\b')
PATTERNS = list_of(TEXT, 'a list of regular expressions')
KEY = {'kind': one_of(KINDS), 'subject': TEXT, 'kept': (lambda v: PATTERNS[0](v) and v != [], 'a non-empty list of '
       'regular expressions'), 'reversed': PATTERNS}  # a status key


def status_of(text: str, key: dict) -> str:
    """status_of('Redis is rejected.', {'kept': ['redis[^.]*reject'], 'reversed': ['use redis'], ...}) -> 'kept'"""
    if any(re.search(pattern, text, re.IGNORECASE) for pattern in key['reversed']):
        return 'reversed'
    return 'kept' if any(re.search(pattern, text, re.IGNORECASE) for pattern in key['kept']) else 'dropped'


def history_text(case: dict) -> str:
    return '\n'.join(text for turn in case['history'] for text in turn_texts(turn))


def request_text(chosen: dict) -> str:
    """A selection's request as statuses and identifiers are read in it: its messages' texts, a newline between."""
    return '\n'.join(message_text(message) or '' for message in chosen['messages'])


def fabricated(summary: str, source: str) -> list[str]:
    """Identifier-shaped strings of a summary found nowhere in its source, once each in order:
    fabricated('Run tests/a.py and tests/b.py, job 7731', 'tests/a.py 7731') -> ['tests/b.py']"""
    return list(dict.fromkeys(found for found in IDENTIFIER.findall(summary) if found not in source))


def check_key(where: str, key, source: str) -> None:
    """Refuse a status key that is malformed, or that reads its own history as other than kept."""
    check_fields(where, key, KEY)
    for pattern in key['kept'] + key['reversed']:
        try:
            re.compile(pattern)
        except re.error as error:
            raise LabError(f'{where}: pattern {pattern!r} is no regular expression: {error}') from None
    if (read := status_of(source, key)) != 'kept':
        raise LabError(f'{where}: the history itself reads as {read} for {key["subject"]!r}; a key must read its '
                       'own source as kept')


def rising(turns: int) -> tuple:
    """The kind of a case's segments: SEGMENTS rising turn counts, the last the history's `turns`."""
    return (lambda ends: isinstance(ends, list) and len(ends) == SEGMENTS and all(type(end) is int for end in ends)
            and ends == sorted(set(ends)) and ends[0] >= 1 and ends[-1] == turns,
            f"{SEGMENTS} rising turn counts ending at the history's {turns}")


def load_keys(path: Path, cases: list[dict]) -> dict:
    """The keys of every case, checked: SEGMENTS rising turn counts ending at the history's, and each status key."""
    keys = lab_files.read_json(path, 'continuation keys')
    check_fields(str(path), keys, dict.fromkeys((case['id'] for case in cases), ANY))  # an entry for each case
    for case in cases:
        where = f'{path}: case {case["id"]}'
        entry = check_fields(where, keys[case['id']], {'segments': rising(len(case['history'])), 'statuses': (
            lambda statuses: isinstance(statuses, list), 'a list of status keys')})
        for index, key in enumerate(entry['statuses']):
            check_key(f'{where}: statuses[{index}]', key, history_text(case))
    return keys


def generations(case: dict, ends: list[int], count, call) -> list[tuple[dict, dict]]:
    """(selection, telemetry) of the request at each segment after the first: the summary generations 1-4."""
    made, prior, start = [], None, 0
    for end in ends[1:]:
        view = {**case, 'history': case['history'][:end]}
        chosen, told = compact(view, count, call, prior, start)
        if told['outcome'] == 'summarised':
            prior, start = chosen['summary'], min(chosen['turns'], default=end)
        made.append((chosen, told))
    return made


def graded(case: dict, key: dict, chosen: dict, told: dict) -> dict:
    """One generation's grades: identifiers found (as scorer.py grades a request), statuses, fabricated identifiers,
    summary tokens."""
    text = request_text(chosen)
    states = [status_of(text, entry) for entry in key['statuses']]
    return {'outcome': told['outcome'], 'found': len(facts_in(case, chosen['messages'])[0]),
            'total': len(case['required']), **{state: states.count(state) for state in ('kept', 'dropped',
                                                                                       'reversed')},
            'fabricated': len(fabricated(chosen.get('summary', ''), history_text(case))),
            'summary_tokens': told['summary_tokens'], 'calls': told['calls']}


def early_losses(case: dict, ends: list[int], rows: list[dict], texts: list[str]) -> list[int]:
    """The generations whose request holds none of the required facts stated in the first segment when the one
    before (the first segment's whole request, for generation 1) held all of them: every early fact lost at once."""
    early = [fact for fact in case['required'] if any(fact in text for turn in case['history'][:ends[0]]
                                                      for text in turn_texts(turn))]
    held = [all(fact in text for fact in early) for text in texts]
    return [number for number in range(1, len(rows) + 1)
            if early and held[number - 1] and not any(fact in texts[number] for fact in early)]


def report(cases: list[dict], keys: dict, count, calls: dict, cases_name: str) -> str:
    """The generation table over all cases, and the cases that lose every early fact at once."""
    totals, losses = [dict.fromkeys(('found', 'total', 'kept', 'dropped', 'reversed', 'fabricated',
                                     'summary_tokens', 'fallbacks'), 0) for _ in range(SEGMENTS - 1)], []
    for case in cases:
        ends = keys[case['id']]['segments']
        made = generations(case, ends, count, replaying(calls, case['id'], cases_name))
        rows = [graded(case, keys[case['id']], chosen, told) for chosen, told in made]
        first = {**case, 'history': case['history'][:ends[0]]}
        texts = [history_text(first)] + [request_text(chosen) for chosen, _ in made]
        losses += [f'{case["id"]} (generation {number})' for number in early_losses(case, ends, rows, texts)]
        for total, row in zip(totals, rows):
            for field in total:
                total[field] += (OUTCOMES[row['outcome']] == 'llm_fallback') if field == 'fallbacks' else row[field]
    base = totals[0]['summary_tokens']  # no growth on a generation 1 without summary tokens (every case fell back)
    table = markdown_table(
        ['Generation', 'Identifiers kept', 'Statuses kept', 'Dropped', 'Reversed', 'Fabricated identifiers',
         'Mean summary tokens', 'Growth on generation 1', 'Fallbacks'],
        [[str(number), f'{t["found"]} of {t["total"]}', str(t['kept']), str(t['dropped']), str(t['reversed']),
          str(t['fabricated']), f'{t["summary_tokens"] / len(cases):.1f}',
          f'{t["summary_tokens"] / base:.2f}' if base else '-',
          str(t['fallbacks'])] for number, t in enumerate(totals, 1)])
    return f'{table}\nCases that lose every early fact at once: {", ".join(losses) or "none"}\n'


def main(argv: list[str]) -> int:
    from tokenizer import counter
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--cases', type=Path, default=CASES)
    parser.add_argument('--keys', type=Path, default=KEYS)
    options = parser.parse_args(argv)
    cases = load_cases(options.cases)
    keys = load_keys(options.keys, cases)
    calls = load(recording_path())['calls']
    print(report(cases, keys, counter(), calls, str(options.cases)), end='')
    return 0


if __name__ == '__main__':
    common.run(main)
