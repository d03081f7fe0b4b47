"""LoCoMo's token F1 for recorded answers, against the gold answers `locomo_cases.py --answers FILE` writes.

    answer_f1.f1('Psychology and counseling', 'Psychology, counseling certification', 'open-domain')  # -> 0.8

Both are normalised as LoCoMo's evaluation script does and scored by the F1 of their shared tokens, a multi-hop
case part by part, an open-domain one up to the gold text's first ';'; docs/answer-check.md says which parts of
LoCoMo's scoring it follows and which not. It reads and writes nothing.
"""
from collections import Counter
from functools import lru_cache
from pathlib import Path
import re
import string

import answer_keys
from common import LabError
from lab_files import read_json
from text import markdown_table

CATEGORIES = {1: 'multi-hop', 2: 'temporal', 3: 'open-domain', 4: 'single-hop', 5: 'adversarial'}  # LoCoMo's
ARTICLES = re.compile(r'\b(a|an|the|and)\b')  # LoCoMo's list, `and` included
PUNCTUATION = str.maketrans('', '', string.punctuation)
MULTI_HOP, OPEN_DOMAIN = CATEGORIES[1], CATEGORIES[3]  # the kinds LoCoMo scores in parts
DIGITS = 3  # decimals of a recorded F1 and of its means
# Right (F1 at the threshold or above) or not, crossed with every required fact in the request or not: as CAUSES'.
FOUR_WAYS = ('right_every_fact', 'right_fact_missing', 'wrong_every_fact', 'wrong_fact_missing')
HEADER = ['Rule', 'All', 'Right, every fact in the request', 'Right, a fact missing',
          'Wrong, every fact in the request', 'Wrong, a fact missing']


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
    answers = document.get('answers') if isinstance(document, dict) else None
    if not isinstance(answers, dict) or not all(isinstance(text, str) for text in answers.values()):
        raise LabError(f'{path}: expected {{"answers": {{case_id: "gold answer"}}}}, as locomo_cases.py --answers '
                       'writes it')
    answer_keys.exactly(path, 'answers', answers, [case['id'] for case in cases], {case['id'] for case in every})
    return answers


def f1_grades(joined: list[tuple], gold: dict, kinds: dict, threshold: float, graded: dict) -> tuple[dict, dict]:
    """As answer_keys.key_grades: per rule, the answers and their mean F1 in all, in the FOUR_WAYS and per kind."""
    scores: dict = {strategy: {} for strategy in graded}
    for strategy, case_id, answer, row in joined:
        score = round(f1(answer['answer'], gold[case_id], kinds[case_id]), DIGITS)
        graded[strategy][case_id].append({'seed': answer['seed'], 'f1': score})
        way = [] if row is None else [FOUR_WAYS[2 * (score < threshold) + bool(row['missing'])]]
        for column in ('all', *way, ('kind', kinds[case_id])):
            scores[strategy].setdefault(column, []).append(score)

    def cell(values: list[float]) -> dict:
        return {'answers': len(values), 'mean_f1': round(sum(values) / len(values), DIGITS) if values else None}
    return {'grader': 'f1', 'f1_threshold': threshold, 'f1': {strategy: {
        **{column: cell(lists.get(column, [])) for column in ('all', *FOUR_WAYS)},
        'by_kind': {column[1]: cell(values) for column, values in lists.items() if isinstance(column, tuple)}}
        for strategy, lists in scores.items()}}, {'graded': graded}


def f1_tables(grades: dict, cut_off: str) -> list[str]:
    """The answers and their mean F1 per rule, in all, the four ways and per kind; then the cut_off line."""
    kinds = list(dict.fromkeys(kind for row in grades['f1'].values() for kind in row['by_kind']))

    def shown(cell: dict | None) -> str:
        return f'{cell["answers"]}: {cell["mean_f1"]:.{DIGITS}f}' if cell and cell['answers'] else '0'
    rows = [[rule, *[shown(row[column]) for column in ('all', *FOUR_WAYS)],
             *[shown(row['by_kind'].get(kind)) for kind in kinds]] for rule, row in grades['f1'].items()]
    return [f'Right: an F1 of {grades["f1_threshold"]:g} or more (--f1-threshold). Each cell: answers: their mean F1; '
            'the four ways leave out answers to requests no longer sent.',
            markdown_table(HEADER + kinds, rows).rstrip('\n'), cut_off]
