"""The answer check's two graders: answer-keys.json's regex patterns, a verdict per answer and why answers failed;
and, with --grader f1, LoCoMo's token F1 against the gold answers `locomo_cases.py --answers FILE` writes.

    answer_keys.answer_verdict('It uses Redis streams.', {'must': ['redis'], 'stale': ['rabbitmq']})  # 'pass', ...
    answer_keys.f1('Psychology and counseling', 'Psychology, counseling certification', 'open-domain')  # -> 0.8

answer_check.py grades with the keys unless --grader f1 is given (rules: docs/answer-check.md). For F1 both texts
are normalised as LoCoMo's evaluation script does and scored by the F1 of their shared tokens, a multi-hop case part
by part, an open-domain one up to the gold text's first ';'; docs/answer-check.md says which parts of LoCoMo's
scoring it follows and which not. Each grader has the same three steps: load (load_answer_keys, load_gold_answers),
grade (key_grades, f1_grades) and show (key_tables, f1_tables). It writes nothing.
"""
from collections import Counter
from functools import lru_cache
from pathlib import Path
import re
from signal import ITIMER_REAL, SIGALRM, setitimer, signal as set_handler
import string

from common import LabError, tell
from lab_files import OBJECT, STRING, check_fields, list_of, read_json
from text import counted, markdown_table

# The regex grader's sentence split, and the words that mark a correction or a missing fact (see answer_verdict).
SENTENCE = re.compile(r'(?<=[.!?])\s+|\n+')
REPLACED = re.compile(r'replac|instead|not |no longer|switch|changed|actually|previous|originally|earlier', re.I)
SAYS_MISSING = re.compile(
    r"(do not|don't|does not|doesn't) (have|say|mention|state|specify|contain)"
    r"|not (mention|state|specif|provide|includ|contain)|no information|not enough information|missing"
    r"|not in the conversation|cannot (find|determine)|provide (more |the )?(context|conversation)", re.I)
# Verdict reasons, as answer-grades.json spells them; two get a column of their own in the summary.
STALE_AS_CURRENT, SAID_MISSING = 'presents a replaced decision as current', 'says the fact is missing'
VERDICTS = ('pass', 'fail', 'incomplete')
COUNTED_REASONS = {SAID_MISSING: 'said_missing', STALE_AS_CURRENT: 'stale_as_current'}
VERDICT_HEADER = ['Strategy', 'Pass', 'Fail', 'Of which said missing', 'Replaced decision as current',
                'Cases passed in every trial']
# Why answers failed: each joined with the fact-recall row of the request it was given (failure_causes).
CAUSES = {'passed': 'Passed, every required fact in the request',
          'passed_fact_missing': 'Passed, a required fact not in the request (a guess, or what the model knew)',
          'model_failed': 'Failed, every required fact in the request (the model)',
          'rule_failed': 'Failed, a required fact not in the request (the rule)',
          'stale_carried': 'Gave a stale fact the request carried'}
NAMED = 5  # ids a refusal names before it only counts them
PATTERNS = list_of(STRING, 'a list of strings')
# A case's key, and the facts each of its lists must match: must a required fact, stale a stale one.
KEY = {'must': (lambda v: PATTERNS[0](v) and v != [], 'a non-empty list of strings'), 'stale': PATTERNS}
MATCHED = {'must': 'required', 'stale': 'stale'}
PATTERN_SECONDS = 1.0  # the longest a key pattern may search one text; one that cannot run away takes microseconds
# The second grader, LoCoMo's token F1 (--grader f1).
GOLD_ANSWERS = (lambda v: OBJECT[0](v) and all(map(STRING[0], v.values())), 'an object of case ids to gold answers')
ARTICLES = re.compile(r'\b(a|an|the|and)\b')  # LoCoMo's list, `and` included
PUNCTUATION = str.maketrans('', '', string.punctuation)
CATEGORIES = {1: 'multi-hop', 2: 'temporal', 3: 'open-domain', 4: 'single-hop', 5: 'adversarial'}  # LoCoMo's
MULTI_HOP, OPEN_DOMAIN = CATEGORIES[1], CATEGORIES[3]  # the kinds LoCoMo scores in parts
F1_DIGITS = 3  # decimals of a recorded F1 and of its means
# Right (F1 at the threshold or above) or not, crossed with every required fact in the request or not: as CAUSES'.
FOUR_WAYS = ('right_every_fact', 'right_fact_missing', 'wrong_every_fact', 'wrong_fact_missing')
F1_HEADER = ['Rule', 'All', 'Right, every fact in the request', 'Right, a fact missing',
             'Wrong, every fact in the request', 'Wrong, a fact missing']


def load_answer_keys(path: Path, cases: list[dict], every: list[dict]) -> dict:
    """{case_id: {'must': [...], 'stale': [...]}} for each of cases and no other id of every (the case set), each
    pattern compiled; one matching none of its case's required (must) or stale facts is refused (must) or warned of."""
    document = read_json(path, 'answer keys', 'restore it from version control')
    keys = check_fields(str(path), document, {'keys': OBJECT}, 'expected {"keys": {case_id: {"must": [...], '
                        '"stale": [...]}}}', exact=False)['keys']
    exactly(path, 'keys', keys, [case['id'] for case in cases], {case['id'] for case in every})
    for case in (case for case in every if case['id'] in keys):
        key = check_fields(f'{path}: keys.{case["id"]}', keys[case['id']], KEY)
        for kind, facts in MATCHED.items():
            where, patterns = f'{path}: keys.{case["id"]}.{kind}', key[kind]
            for index, pattern in enumerate(patterns):
                try:
                    matched = any(found(pattern, fact) for fact in case[facts])
                except re.error as error:
                    raise LabError(f'{where}[{index}] {pattern!r} is not a regular expression ({error})') from None
                if not matched and kind == 'must':
                    raise LabError(f'{where}[{index}] {pattern!r} matches none of the case\'s required facts, so '
                                   'no request could earn it; a key expects only what a required fact states')
                if not matched:
                    tell(f'{where}[{index}] {pattern!r}: warning: matches none of the case\'s stale facts; check it '
                         'for a typo')
    return keys


def exactly(path: Path, what: str, found: dict, case_ids: list[str], known: set[str]) -> None:
    """Refuse a file that has no entry for one of case_ids, or one for an id not known, naming a few of them."""
    missing, extra = [i for i in case_ids if i not in found], [i for i in found if i not in known]
    if missing or extra:
        raise LabError(f'{path}: {what} must cover every chosen case and no other id: none for {len(missing)} '
                       f'{missing[:NAMED]}, {len(extra)} for no case {extra[:NAMED]}')


def found(pattern: str, text: str) -> bool:
    """Whether a key pattern matches text, ignoring case; past PATTERN_SECONDS, one LabError: a user's pattern such as
    (a+)+$ would backtrack for hours on a 41-character answer. The timer's signal stops even a search in C."""
    def stop(*_) -> None:
        raise LabError(f'the key pattern {pattern!r} ran past {PATTERN_SECONDS:g} s on a text of {len(text):,} '
                       'characters and was stopped: it backtracks without bound (a repeat inside a repeat, as in '
                       '(a+)+); rewrite it')
    previous = set_handler(SIGALRM, stop)
    setitimer(ITIMER_REAL, PATTERN_SECONDS)
    try:
        return re.search(pattern, text, re.I) is not None
    finally:
        setitimer(ITIMER_REAL, 0)
        set_handler(SIGALRM, previous)


def matches_any(patterns: list[str], text: str) -> bool:
    return any(found(pattern, text) for pattern in patterns)


def answer_verdict(text: str, key: dict) -> tuple[str, str]:
    """(verdict, reason) for one answer to the case of key. A sentence naming a stale pattern reads as a
    correction when it matches REPLACED or also states a must pattern; else it offers the old decision."""
    if not text.strip():  # nothing to grade; the text itself is matched unstripped
        return 'incomplete', 'no answer'
    if any(matches_any(key['stale'], sentence) for sentence in SENTENCE.split(text)
           if not REPLACED.search(sentence) and not matches_any(key['must'], sentence)):
        return 'fail', STALE_AS_CURRENT
    if all(found(must, text) for must in key['must']):
        return 'pass', 'every required fact'
    return 'fail', (SAID_MISSING if SAYS_MISSING.search(text) else 'required fact absent')


def tally(by_case: dict) -> dict:
    """One strategy's summary row from its {case_id: [verdict entry, ...]}."""
    every = [entry for entries in by_case.values() for entry in entries]
    return {**{verdict: sum(entry['verdict'] == verdict for entry in every) for verdict in VERDICTS},
            **{column: sum(entry['reason'] == reason for entry in every) for reason, column in COUNTED_REASONS.items()},
            'cases_passed_every_trial': sum(all(entry['verdict'] == 'pass' for entry in entries)
                                            for entries in by_case.values())}


def key_grades(joined: list[tuple], keys: dict, graded: dict) -> tuple[dict, dict]:
    """(grades before the checks, after them) from (strategy, case, answer, its request's fact-recall row or None)."""
    causes = {strategy: dict.fromkeys(CAUSES, 0) for strategy in graded}
    to_read = []
    for strategy, case_id, answer, row in joined:
        key, where = keys[case_id], {'strategy': strategy, 'case': case_id, 'seed': answer['seed']}
        verdict, reason = answer_verdict(answer['answer'], key)
        graded[strategy][case_id].append({'seed': answer['seed'], 'verdict': verdict, 'reason': reason})
        if row is not None:
            # CAUSES' first four, in order: passed or failed, crossed with every required fact sent or not.
            causes[strategy][list(CAUSES)[2 * (verdict != 'pass') + bool(row['missing'])]] += 1
            causes[strategy]['stale_carried'] += reason == STALE_AS_CURRENT and bool(row['stale_included'])
        # A sentence naming a stale and a must pattern reads as a correction, whichever decision it offers.
        to_read += [{**where, 'sentence': sentence.strip()} for sentence in SENTENCE.split(answer['answer'])
                    if matches_any(key['stale'], sentence) and matches_any(key['must'], sentence)]
    return ({'summary': {strategy: tally(by_case) for strategy, by_case in graded.items()}, 'failure_causes': causes},
            {'answers_to_read': to_read, 'graded': graded})


def key_tables(grades: dict, cut_off: str) -> list[str]:
    """The summary in the original's layout, why answers failed, the cut_off line, the answers a person must read."""
    summary = grades['summary']
    rows = [[name, f'{s["pass"]} of {s["pass"] + s["fail"] + s["incomplete"]}', str(s['fail']),
             str(s['said_missing']), str(s['stale_as_current']),
             f'{s["cases_passed_every_trial"]} of {len(grades["graded"][name])}'] for name, s in summary.items()]
    causes = [[name, *map(str, counts.values())] for name, counts in grades['failure_causes'].items()]
    incomplete = ', '.join(f'{strategy} {s["incomplete"]}' for strategy, s in summary.items() if s['incomplete'])
    to_read = grades['answers_to_read']
    answers = len({(a['strategy'], a['case'], a['seed']) for a in to_read})
    return [markdown_table(VERDICT_HEADER, rows) + 'Why answers failed (leaving out answers to requests no '
            'longer sent):\n' + markdown_table(['Rule', *CAUSES.values()], causes).rstrip('\n'),
            *([f'Incomplete (empty answers): {incomplete}'] if incomplete else []), cut_off,
            'To read (a sentence names both the replaced and the current decision, so the grader cannot tell '
            f'which it offers as current; verdicts stand as graded): {counted(answers, "answer")}',
            *[f'  {a["strategy"]} {a["case"]} seed {a["seed"]}: {a["sentence"]}' for a in to_read]]


@lru_cache(maxsize=1)
def porter_stemmer():
    import Stemmer  # PyStemmer, locked; imported here so that a missing package is common.run's one line
    return Stemmer.Stemmer('porter')


def tokens(text: str) -> list[str]:
    """'The Cats, and a dog!' -> ['cat', 'dog']"""
    normal = ARTICLES.sub(' ', text.replace(',', '').lower().translate(PUNCTUATION))
    return porter_stemmer().stemWords(normal.split())


def token_f1(answer: str, gold: str) -> float:
    said, wanted = tokens(answer), tokens(gold)
    shared = sum((Counter(said) & Counter(wanted)).values())
    if not shared:
        return 0.0
    precision, recall = shared / len(said), shared / len(wanted)
    return 2 * precision * recall / (precision + recall)


def f1(answer: str, gold: str, kind: str) -> float:
    """An answer's F1 against its case's gold answer, scored as LoCoMo scores the case's category."""
    if kind == OPEN_DOMAIN:
        gold = gold.split(';')[0]
    if kind != MULTI_HOP:
        return token_f1(answer, gold)
    parts, wanted = answer.split(','), gold.split(',')  # spaces around a part are no tokens: nothing to strip
    return sum(max(token_f1(part, one) for part in parts) for one in wanted) / len(wanted)


def load_gold_answers(path: Path, cases: list[dict], every: list[dict]) -> dict[str, str]:
    """{case_id: gold answer} for each of cases and no id but those of every, from {"answers": {id: text}}."""
    document = read_json(path, 'gold answers', 'write it with `locomo_cases.py --answers FILE`')
    answers = check_fields(str(path), document, {'answers': GOLD_ANSWERS}, 'expected {"answers": {case_id: '
                           '"gold answer"}}, as locomo_cases.py --answers writes it', exact=False)['answers']
    exactly(path, 'answers', answers, [case['id'] for case in cases], {case['id'] for case in every})
    return answers


def f1_grades(joined: list[tuple], gold: dict, kinds: dict, threshold: float, graded: dict) -> tuple[dict, dict]:
    """As key_grades: per rule, the answers and their mean F1 in all, in the FOUR_WAYS and per kind."""
    scores: dict = {strategy: {} for strategy in graded}
    for strategy, case_id, answer, row in joined:
        score = round(f1(answer['answer'], gold[case_id], kinds[case_id]), F1_DIGITS)
        graded[strategy][case_id].append({'seed': answer['seed'], 'f1': score})
        way = [] if row is None else [FOUR_WAYS[2 * (score < threshold) + bool(row['missing'])]]
        for column in ('all', *way, ('kind', kinds[case_id])):
            scores[strategy].setdefault(column, []).append(score)

    def cell(values: list[float]) -> dict:
        return {'answers': len(values), 'mean_f1': round(sum(values) / len(values), F1_DIGITS) if values else None}
    return {'grader': 'f1', 'f1_threshold': threshold, 'f1': {strategy: {
        **{column: cell(lists.get(column, [])) for column in ('all', *FOUR_WAYS)},
        'by_kind': {column[1]: cell(values) for column, values in lists.items() if isinstance(column, tuple)}}
        for strategy, lists in scores.items()}}, {'graded': graded}


def f1_tables(grades: dict, cut_off: str) -> list[str]:
    """The answers and their mean F1 per rule, in all, the four ways and per kind; then the cut_off line."""
    kinds = list(dict.fromkeys(kind for row in grades['f1'].values() for kind in row['by_kind']))

    def shown(cell: dict | None) -> str:
        return f'{cell["answers"]}: {cell["mean_f1"]:.{F1_DIGITS}f}' if cell and cell['answers'] else '0'
    rows = [[rule, *[shown(row[column]) for column in ('all', *FOUR_WAYS)],
             *[shown(row['by_kind'].get(kind)) for kind in kinds]] for rule, row in grades['f1'].items()]
    return [f'Right: an F1 of {grades["f1_threshold"]:g} or more (--f1-threshold). Each cell: answers: their mean F1; '
            'the four ways leave out answers to requests no longer sent.',
            markdown_table(F1_HEADER + kinds, rows).rstrip('\n'), cut_off]
