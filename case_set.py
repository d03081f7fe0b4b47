"""What a case set is: read one, check every case, share what the cases repeat, and grade a request.

    from case_set import grade, load_cases
    cases = load_cases('cases.json')   # checked cases, or one LabError naming file, case and field
    grade(cases[0], RULES['recent'](cases[0], count_request))   # one report row: which facts reached the request

The case format, and the validation that refuses whatever could make a result lie, are docs/cases.md. The
grader is exact text: a row says which required and stale facts appear, character for character, in the
request's messages (a fact the notes quoted escaped still counts); it reads the request, not a reply.
Standard library only, so a step that counts nothing (the LoCoMo conversion) can check cases without the
tokenizer. It reads and prints nothing on its own; evaluate.py and the other scripts call it.
"""
from operator import itemgetter
from pathlib import Path

from common import SPLITS, LabError, allowance, progress, read_json
from strategies import escape

# What a case is. Changing any of these changes which case sets are accepted.
CASE_FIELDS = ('id', 'split', 'kind', 'instructions', 'current', 'history', 'budget', 'required', 'stale')
BUDGET_FIELDS = ('context_limit', 'max_new_tokens', 'margin')
ROLES = {'user', 'assistant'}  # the fields of a history turn
TURN_TEXTS, CONTENT = itemgetter('user', 'assistant'), itemgetter('content')  # a turn's texts; a message's
# The official chat template rewrites assistant text that contains these (it strips thought channels), so the
# counter refuses them (tokenizer.py) and a case may not hold them.
THINKING_MARKERS = ('<|channel>', '<channel|>')


class CaseError(LabError):
    """The case set is malformed; the message names the file, the case and the field."""


def check_budget(where: str, budget) -> None:
    if not isinstance(budget, dict) or set(budget) != set(BUDGET_FIELDS):
        keys = list(budget) if isinstance(budget, dict) else []
        raise CaseError(f'{where}: field budget must be an object with exactly {list(BUDGET_FIELDS)}; missing '
                        f'{[name for name in BUDGET_FIELDS if name not in keys]}, unexpected '
                        f'{sorted(set(keys) - set(BUDGET_FIELDS))}')
    for name in BUDGET_FIELDS:
        value = budget[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CaseError(f'{where}: field budget.{name} must be a non-negative integer, got {value!r}')
    if allowance(budget) <= 0:
        raise CaseError(f'{where}: field budget leaves no input allowance '
                        '(context_limit - max_new_tokens - margin must be positive)')


def check_encodable(where: str, fields: list[tuple[str, str]]) -> None:
    """JSON can carry lone surrogates ("\\ud800") that no tokenizer or UTF-8 file accepts; name the field."""
    for name, text in fields:
        try:
            text.encode('utf-8')
        except UnicodeEncodeError:
            raise CaseError(f'{where}: field {name} holds a lone surrogate, which is not text') from None


def check_history(where: str, history, checked: dict) -> tuple[tuple[tuple[str, str], ...], str]:
    """The history as (user, assistant) pairs, and its messages joined by NUL for the fact search, once it holds
    nothing the counter cannot count: [{'user': 'Hi', 'assistant': 'Yes'}] -> ((('Hi', 'Yes'),), 'Hi\\0Yes').
    `checked` keeps the texts of each conversation checked so far: LoCoMo's 1,534 cases hold 10."""
    if not isinstance(history, list):
        raise CaseError(f'{where}: field history must be a list of {{"user", "assistant"}} objects')
    for index, turn in enumerate(history):
        if not isinstance(turn, dict) or turn.keys() != ROLES or not isinstance(turn['user'], str) \
                or not isinstance(turn['assistant'], str):
            raise CaseError(f'{where}: field history[{index}] must be an object with exactly '
                            'the string fields user and assistant')
    pairs = tuple(map(TURN_TEXTS, history))
    if pairs not in checked:
        for index, (_, assistant) in enumerate(pairs):
            if any(marker in assistant for marker in THINKING_MARKERS):  # the chat format would strip it out
                raise CaseError(f'{where}: field history[{index}].assistant contains a thinking-channel marker '
                                f'{list(THINKING_MARKERS)}, which the counter does not cover')
        check_encodable(where, [(f'history[{i}].{role}', text) for i, pair in enumerate(pairs)
                                for role, text in zip(('user', 'assistant'), pair)])
        checked[pairs] = '\0'.join(text for pair in pairs for text in pair)
    return pairs, checked[pairs]


def check_case(where: str, case: dict, conversations: dict | None = None) -> None:
    """Raise CaseError for the first thing wrong with one case; `where` already names file and case.
    `conversations` is check_history's record of the conversations checked so far."""
    missing = [name for name in CASE_FIELDS if name not in case]
    extra = sorted(set(case) - set(CASE_FIELDS))
    if missing or extra:
        raise CaseError(f'{where}: fields must be exactly {list(CASE_FIELDS)}; '
                        f'missing {missing}, unexpected {extra}')
    for name in ('id', 'split', 'kind', 'instructions', 'current'):
        if not isinstance(case[name], str) or not case[name].strip():
            raise CaseError(f'{where}: field {name} must be a non-empty string, got {case[name]!r}')
    if case['split'] not in SPLITS:
        raise CaseError(f'{where}: field split must be one of {list(SPLITS)}, got {case["split"]!r}')
    pairs, joined = check_history(where, case['history'], {} if conversations is None else conversations)
    check_budget(where, case['budget'])
    check_encodable(where, [(name, case[name]) for name in ('id', 'split', 'kind', 'instructions', 'current')])
    for name in ('required', 'stale'):
        facts = case[name]
        if not isinstance(facts, list) or not all(isinstance(fact, str) and fact for fact in facts):
            raise CaseError(f'{where}: field {name} must be a list of non-empty strings')
        check_encodable(where, [(f'{name}[{i}]', fact) for i, fact in enumerate(facts)])
    if not case['required']:
        raise CaseError(f'{where}: field required is empty; a case needs at least one required fact')
    if not case['history']:
        raise CaseError(f'{where}: field history is empty; the required facts must be stated in its messages')
    if both := [fact for fact in case['stale'] if fact in case['required']]:
        raise CaseError(f'{where}: field stale: fact {both[0]!r} is also required; a replaced fact cannot be one '
                        'the question needs')
    for name in ('required', 'stale'):
        for fact in case[name]:
            # A fact the conversation never states would look like a strategy failure. A fact without NUL found
            # in `joined` lies inside one message: no match spans a NUL.
            if fact not in joined or ('\0' in fact and not any(fact in text for pair in pairs for text in pair)):
                raise CaseError(f'{where}: field {name}: fact {fact!r} does not occur in any message of the history')


def load_cases(path: Path) -> list[dict]:
    """Read and validate a case set; raise CaseError naming file, case and field on the first problem."""
    path = Path(path)
    cases = read_json(path, 'case set')  # a LabError naming the file if it is not JSON
    if not isinstance(cases, list):
        raise CaseError(f'{path}: the top level must be a list of cases, got {type(cases).__name__}')
    if not cases:
        raise CaseError(f'{path}: the case set is empty')
    seen, conversations = set(), {}
    for index, case in enumerate(cases):
        if not isinstance(case, dict):
            raise CaseError(f'{path}: case {index}: expected an object, got {type(case).__name__}')
        label = case.get('id') if isinstance(case.get('id'), str) and case.get('id') else f'at index {index}'
        where = f'{path}: case {label}'
        check_case(where, case, conversations)
        if case['id'] in seen:
            raise CaseError(f'{where}: field id is a duplicate; every case id must be unique')
        seen.add(case['id'])
    return share_equal_parts(cases)


def share_equal_parts(cases: list[dict]) -> list[dict]:
    """A copy of a checked case set in which equal texts, turns, histories and budgets are one object each.

    Cases with the same conversation share one history list (copy[0]['history'] is copy[1]['history']). It is
    built from new objects only: a string kept from the parsed JSON would pin the memory around it (measured on
    LoCoMo: 298 MiB resident after loading becomes 42 MiB). A caller that changes a case must copy it first.
    """
    texts, turns, histories, budgets = {}, {}, {}, {}

    def one(text: str) -> str:
        if text not in texts:
            texts[text] = text.encode('utf-8').decode('utf-8')  # a new object; str(text) would be the old one
        return texts[text]

    shared = []
    for case in cases:
        history = tuple(map(TURN_TEXTS, case['history']))
        if history not in histories:  # keyed by the parsed texts while loading, so a repeat costs one lookup
            histories[history] = [turns.setdefault((one(user), one(said)), {'user': one(user), 'assistant': one(said)})
                                  for user, said in history]
        budget = tuple(case['budget'][name] for name in BUDGET_FIELDS)
        budgets.setdefault(budget, dict(zip(BUDGET_FIELDS, budget)))
        lean = {name: one(case[name]) for name in ('id', 'split', 'kind', 'instructions', 'current')}
        lean.update(history=histories[history], budget=budgets[budget],
                    required=[one(fact) for fact in case['required']], stale=[one(fact) for fact in case['stale']])
        shared.append(lean)
    return shared


def grade(case: dict, chosen: dict) -> dict:
    """One report row: which required and stale facts reached the chosen request."""
    text = '\n'.join(map(CONTENT, chosen['messages']))

    def present(fact: str) -> bool:
        return fact in text or escape(fact) in text  # notes quote facts escaped

    reached = [fact for fact in case['required'] if present(fact)]
    return {'case': case['id'], 'split': case['split'], 'kind': case['kind'], 'turns': chosen['turns'],
            'notes': chosen['notes'], 'input_tokens': chosen['input_tokens'],
            'within_budget': chosen['input_tokens'] <= allowance(case),
            'required_found': len(reached), 'required_total': len(case['required']),
            'missing': [fact for fact in case['required'] if fact not in reached],
            'stale_included': [fact for fact in case['stale'] if present(fact)]}


def grade_rules(cases: list[dict], rules: dict, count, script: str = '') -> dict[str, list[dict]]:
    """Rows of every rule on every case, in case-set order; progress on stderr when `script` names the caller."""
    rows = {name: [] for name in rules}
    for done, case in enumerate(cases, 1):
        for name, rule in rules.items():
            rows[name].append(grade(case, rule(case, count)))
        if script:
            progress(script, done, len(cases))
    return rows
