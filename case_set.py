"""What a case set is: read one, check every case, and share what the cases repeat.

    from case_set import load_case_set, load_cases
    cases = load_cases('cases.json')   # checked cases, or one LabError naming file, case and field
    cases, sha256 = load_case_set('cases.json')   # and the SHA-256 of the bytes that were parsed
    check_fits('cases.json', cases, counter())  # refuses a case whose bare request exceeds its allowance

The case format, and the validation that refuses whatever could make a result lie, are docs/cases.md; how a
request is graded is scorer.py. Standard library only, so a step that counts nothing (the LoCoMo conversion) can
check cases without the tokenizer. It writes nothing and prints only warn_quoted_stale's line on stderr;
evaluate.py and the other scripts call it.
"""
import json
from pathlib import Path

from common import LabError, tell
from lab_files import ANY, COUNT, STRING, TEXT, check_fields, list_of, one_of, parse_json, read_json_file
from shapes import BUDGET_FIELDS, SPLITS, TURN_ROLES, allowance, at_limit, build_request, each_turn, is_agent, \
    make_turn, turn_texts
from tool_formats import CounterError, checked_message, checked_tools, invalid, refuse_thinking

# What a case is, field by field (lab_files' kinds). Changing any of these changes which case sets are accepted.
BUDGET_KINDS = dict.fromkeys(BUDGET_FIELDS, COUNT)
FACTS = list_of(TEXT, 'a list of non-empty strings')
NAMES = {'id': TEXT, 'split': one_of(SPLITS), 'kind': TEXT}
CASE = {**NAMES, 'instructions': TEXT, 'current': TEXT,
        'history': (lambda v: isinstance(v, list), 'a list of {"user", "assistant"} objects'),
        'budget': BUDGET_KINDS, 'required': FACTS, 'stale': FACTS}
PAIR = dict.fromkeys(TURN_ROLES, STRING)  # a turn of a case's history
# An agent case (docs/agents.md): a message list in place of instructions, history and current; tools optional.
AGENT_CASE = {**NAMES, 'messages': (lambda v: isinstance(v, list) and len(v) >= 2,
                                    'a list: the system message, the turns, the question'),
              'tools': ANY, 'budget': BUDGET_KINDS, 'required': FACTS, 'stale': FACTS}
# Fields of a message OpenAI's API returns and accepts, read as absent when they hold one of these values: no
# template renders them. Any other value is refused (a refusal's text would be counted as nothing).
EMPTY_FIELDS = {'refusal': [None], 'annotations': [None, []], 'audio': [None], 'function_call': [None],
                'tool_calls': [None]}


class CaseError(LabError):
    """The case set is malformed; the message names the file, the case and the field."""


def check_budget(where: str, budget) -> None:
    check_fields(where, budget, BUDGET_KINDS, name='budget', error=CaseError)
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
    `checked` keeps each conversation checked so far, by its turns' fields: LoCoMo's 1,534 cases hold 10."""
    try:  # the history's fields as read, a key found in C: each conversation is checked once, not once a question
        key = tuple(map(tuple, map(dict.items, history)))
        known = checked.get(key)
    except TypeError:  # a turn that is no object, or holds no text: refused below
        key = known = None
    if known is not None:
        return known
    for index, turn in enumerate(history):
        check_fields(where, turn, PAIR, name=f'history[{index}]', error=CaseError)
    pairs = each_turn(turn_texts, history)
    for index, (_, assistant) in enumerate(pairs):
        refuse_thinking(f'{where}: field history[{index}].assistant', assistant, CaseError)
    check_encodable(where, [(f'history[{i}].{role}', text) for i, pair in enumerate(pairs)
                            for role, text in zip(TURN_ROLES, pair)])
    checked[key] = pairs, '\0'.join(text for pair in pairs for text in pair)
    return checked[key]


def joined_parts(where: str, role: str, content):
    """Content given as OpenAI's text parts as one string, joined as Gemma 4's template (the one official template of
    the six that reads parts) joins them: a tool result's texts as they are, a user's or assistant's each trimmed;
    [{'type': 'text', 'text': ' Hi '}, {'type': 'text', 'text': 'there'}] -> 'Hithere'. Other content is returned."""
    if not isinstance(content, list):
        return content
    for index, part in enumerate(content):
        kind = repr(part.get('type')) if isinstance(part, dict) else f'a {type(part).__name__}'
        if kind != "'text'":
            raise CaseError(f'{where}: content part {index} is {kind}, not {{"type": "text", "text": string}}; the '
                            'counters count text only (an image, audio or file is not counted by this lab)')
        if set(part) != {'type', 'text'} or not isinstance(part['text'], str):
            raise CaseError(f'{where}: content part {index} must be {{"type": "text", "text": string}}, got '
                            f'{json.dumps(part, ensure_ascii=False):.60}')
    if role == 'system':  # Gemma 4's writes a space after each part, which a string cannot hold
        raise CaseError(f'{where}: a system message\'s content must be a string, not parts')
    return ''.join(part['text'] if role == 'tool' else part['text'].strip() for part in content)


def as_counted(where: str, message):
    """A message as the counter reads it (tool_formats.checked_message): OpenAI's null content beside calls becomes
    '', text parts one string (joined_parts), the fields OpenAI returns empty (EMPTY_FIELDS) go, and a call's
    arguments held as a JSON string are parsed, as Ollama's OpenAI-compatible endpoint parses them:
    {'role': 'assistant', 'content': None, 'refusal': None, 'tool_calls': [{..., 'arguments': '{"a": 1}'}]} ->
    content '', {'a': 1}."""
    if not isinstance(message, dict):
        return message
    message = {key: value for key, value in message.items() if not (key in EMPTY_FIELDS and value in EMPTY_FIELDS[key])}
    if full := [key for key in EMPTY_FIELDS if key in message and key != 'tool_calls']:
        empty = ' or '.join(map(json.dumps, EMPTY_FIELDS[full[0]]))
        raise CaseError(f'{where}: field {full[0]} is read only when empty ({empty}), since no official template '
                        f'renders it; got {json.dumps(message[full[0]], ensure_ascii=False):.60}')
    if 'content' in message:
        message['content'] = joined_parts(where, message.get('role'), message['content'])
    if not isinstance(message.get('tool_calls'), list):
        return message
    calls = []
    for index, call in enumerate(message['tool_calls']):
        function = call.get('function') if isinstance(call, dict) else None
        if isinstance(function, dict) and isinstance(function.get('arguments'), str):
            try:  # a repeated key, a nesting too deep to read: one line
                arguments = parse_json(function['arguments'], f'{where}, tool call {index}: arguments',
                                       "call's arguments string", line=False)
            except LabError as error:
                raise CaseError(str(error)) from None
            call = {**call, 'function': {**function, 'arguments': arguments}}
        calls.append(call)
    return {**message, 'content': '' if message.get('content') is None else message['content'], 'tool_calls': calls}


def agent_case(where: str, case: dict) -> dict:
    """An agent case as the lab holds it: its messages' first the instructions, its last the question, and the
    turns between, each a user message and the assistant and tool messages after it (shapes.turn_messages)."""
    messages = check_fields(where, case, AGENT_CASE, optional=['tools'], error=CaseError)['messages']
    try:  # what the counter cannot read, the loader refuses: one check of a message's shape
        plain = [checked_message(index, as_counted(f'{where}: field messages: message {index}', message))
                 for index, message in enumerate(messages)]
        tools = checked_tools(case.get('tools')) or []
    except CounterError as error:
        field = 'tools' if str(error).startswith('tools') else 'messages'
        raise CaseError(f'{where}: field {field}: {error}') from None
    if why := invalid(plain):
        raise CaseError(f'{where}: field messages: {why}')
    turns = []
    for message in plain[1:-1]:
        turns += [[]] * (message['role'] == 'user')
        turns[-1].append(message)
    return {name: case[name] for name in ('id', 'split', 'kind')} | {
        'instructions': plain[0]['content'], 'current': plain[-1]['content'], 'history': turns, 'tools': tools,
        'budget': case['budget'], 'required': case['required'], 'stale': case['stale']}


def check_case(where: str, case: dict, conversations: dict | None = None) -> dict:
    """The case as the lab holds it, or CaseError for the first thing wrong with it; `where` already names file and
    case. `conversations` is check_history's record of the conversations checked so far."""
    if 'messages' in case:  # its instructions and question are its first and last messages' text
        case = check_fields(where, agent_case(where, case), CASE, exact=False, error=CaseError)
    else:
        check_fields(where, case, CASE, error=CaseError)
    if is_agent(case):  # an agent case, its messages checked as they were read (agent_case)
        pairs = each_turn(turn_texts, case['history'])
        joined = '\0'.join(text for texts in pairs for text in texts)
    else:
        pairs, joined = check_history(where, case['history'], {} if conversations is None else conversations)
    check_budget(where, case['budget'])
    check_encodable(where, [(name, case[name]) for name in ('id', 'split', 'kind', 'instructions', 'current')])
    for name in ('required', 'stale'):
        check_encodable(where, [(f'{name}[{i}]', fact) for i, fact in enumerate(case[name])])
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
                raise CaseError(f'{where}: field {name}: fact {fact!r} does not occur in any message of the history'
                                + json_hint(fact, joined) * is_agent(case))
    warn_quoted_stale(where, case, pairs)
    return case


def json_hint(fact: str, joined: str) -> str:
    """What an agent case's fact not found is told: the grader reads a call's arguments as JSON writes them."""
    escaped = json.dumps(fact, ensure_ascii=False)[1:-1]
    if escaped != fact and escaped in joined:
        return f"; in a call's arguments it is written JSON-escaped: {escaped!r}"
    return "; a fact in a call's arguments is written JSON-escaped, as json.dumps writes it (\\\" for \")"


def warn_quoted_stale(where: str, case: dict, pairs: tuple) -> None:
    """One line on stderr for each stale fact quoted again in a turn that states a required fact (a correction that
    names what it replaces): a rule keeps whole turns, so every request carrying that fact sends the stale one."""
    for stale in case['stale']:
        for turn, texts in enumerate(pairs):
            if any(stale in text for text in texts) and (required := next(
                    (fact for fact in case['required'] if any(fact in text for text in texts)), None)):
                tell(f'{where}: warning: stale fact {stale!r} is quoted again in history turn {turn}, which states '
                     f'the required fact {required!r}: every request carrying that turn sends both (docs/agents.md)')
                break


def load_cases(path: Path) -> list[dict]:
    """Read and validate a case set; raise CaseError naming file, case and field on the first problem."""
    return load_case_set(path)[0]


def load_case_set(path: Path) -> tuple[list[dict], str]:
    """(the checked cases, the SHA-256 of the bytes they were parsed from): a report names what it graded."""
    path = Path(path)
    cases, sha256 = read_json_file(path, 'case set')  # a LabError naming the file if it is not JSON
    if not isinstance(cases, list):
        raise CaseError(f'{path}: the top level must be a list of cases, got {type(cases).__name__}')
    if not cases:
        raise CaseError(f'{path}: the case set is empty')
    seen, conversations, checked = set(), {}, []
    for index, case in enumerate(cases):
        if not isinstance(case, dict):
            raise CaseError(f'{path}: case {index}: expected an object, got {type(case).__name__}')
        label = case.get('id') if isinstance(case.get('id'), str) and case.get('id') else f'at index {index}'
        where = f'{path}: case {label}'
        checked.append(check_case(where, case, conversations))
        if case['id'] in seen:
            raise CaseError(f'{where}: field id is a duplicate; every case id must be unique')
        seen.add(case['id'])
    return share_equal_parts(checked), sha256


def share_equal_parts(cases: list[dict]) -> list[dict]:
    """A copy of a checked case set in which equal texts, turns, histories and budgets are one object each.

    Cases with the same conversation share one history list (copy[0]['history'] is copy[1]['history']). It is
    built from new objects only: a string kept from the parsed JSON would pin the memory around it (measured on
    LoCoMo: 298 MiB resident after loading becomes 42 MiB). A caller that changes a case must copy it first.
    """
    texts, turns, histories, budgets = {}, {}, {}, {}

    def one(text: str) -> str:  # a new object, one per distinct text; str(text) would be the old one
        return texts.setdefault(text, text.encode('utf-8').decode('utf-8'))

    shared = []
    for case in cases:
        if is_agent(case):  # an agent case: made of new objects by agent_case already
            shared.append(case)
            continue
        history = each_turn(turn_texts, case['history'])
        if history not in histories:  # keyed by the parsed texts while loading, so a repeat costs one lookup
            own = [tuple(map(one, pair)) for pair in history]
            histories[history] = [turns.setdefault(texts, make_turn(texts)) for texts in own]
        budget = tuple(case['budget'][name] for name in BUDGET_FIELDS)
        lean = {name: one(case[name]) for name in ('id', 'split', 'kind', 'instructions', 'current')}
        lean.update(history=histories[history], budget=budgets.setdefault(budget, dict(zip(BUDGET_FIELDS, budget))),
                    required=[one(fact) for fact in case['required']], stale=[one(fact) for fact in case['stale']])
        shared.append(lean)
    return shared


def check_fits(path, cases: list[dict], count, hint: str = '') -> None:
    """Refuse the first case whose instructions and question alone exceed its allowance: no rule could fit it."""
    for case in cases:
        if (bare := count(build_request(case, []))) > allowance(case):
            raise LabError(f'{path}: case {case["id"]}: field budget allows {allowance(case)} input tokens, '
                           f'but the instructions and question alone need {bare}{hint}')


def check_reserved(path: Path, cases: list[dict]) -> None:
    """Refuse cases that keep different numbers of tokens for the answer and the margin."""
    kept = [case['budget']['max_new_tokens'] + case['budget']['margin'] for case in cases]
    if other := next((index for index, tokens in enumerate(kept) if tokens != kept[0]), 0):  # 0: none differs
        raise LabError(f"{path}: cases {cases[0]['id']} and {cases[other]['id']} keep {kept[0]} and "
                       f'{kept[other]} tokens for the answer and margin; a sweep gives every case one '
                       'context limit, so they must keep the same')


def check_limits(path: Path, cases: list[dict], limits: list[int], count) -> None:
    """Refuse a smallest limit some case cannot fit, naming the case that needs most and the limit that works.
    A case fits a limit when its bare request (no history) fits its allowance: dev-spread needs 42 + 96 + 32 = 170."""
    need, case = max(((count(build_request(case, [])) + case['budget']['context_limit'] - allowance(case), case)
                      for case in cases), key=lambda pair: pair[0])  # the first most demanding
    check_fits(path, at_limit([case], limits[0]), count, f'; the smallest limit every case fits is {need}')
