"""How a request is scored: which facts reach it, by exact text, and what graded rows add up to.

    from scorer import facts_in, graded_row, totals
    facts_in(case, messages)        # (required facts in the messages, stale facts in them)
    invalid(messages)               # why a provider would refuse the request, or None
    graded_row(case, selection)     # one report row (shapes.ROW_FIELDS), graded as the chosen counter renders it
    totals(rows)                    # a rule's figures (shapes.RULE_TOTALS), or the best possible's

A fact reaches a request when it appears, character for character, in one of its messages' texts
(shapes.message_text: the content, and a call's name and arguments), or as the notes block quotes it (shapes.escape);
only what the chosen counter's template writes counts (tool_formats.as_rendered: Llama 3's drops an assistant's text
beside a call); an invalid request carries none. It reads the request, never a reply, and calls no model. Besides:
the two checks every run makes, that a case's bare request fits and that a count is the sum of its parts. It reads,
prints and writes nothing.
"""
from bisect import bisect_right
from itertools import accumulate

from common import LabError
from shapes import (AGENT_ROW_FIELDS, AGENT_TOTALS, BEST_TOTALS, ROW_FIELDS, RULE_TOTALS, SPLITS, allowance,
                    build_request, escape, message_text, per_history, turn_texts)
from tokenizer import SELECTED
from tool_formats import as_rendered


def facts_in(case: dict, messages: list[dict], counter: str | None = None) -> tuple[list[str], list[str]]:
    """(the required facts, the stale facts) that reach these messages as the template of `counter` (the chosen
    counter's unless named) writes them (tool_formats.as_rendered), each in the case's order.

    With required ['Use PostgreSQL'] and stale ['We will use MySQL'], messages holding 'We will use MySQL now.'
    give ([], ['We will use MySQL']); a note quoting 'a < b' as 'a &lt; b' carries the fact 'a < b'.
    """
    text = '\n'.join(map(message_text, as_rendered(counter or SELECTED['name'], messages)))
    return tuple([fact for fact in case[key] if fact in text or escape(fact) in text] for key in ('required', 'stale'))


def request_facts(case: dict, chosen: dict, counter: str | None = None) -> tuple[list[str], list[str]]:
    """facts_in(case, chosen['messages'], counter), read from each kept turn's facts (holders) where the request is the
    system message, the kept turns of a pair case in order and the question: a fact without a newline lies in one
    message, and every template writes a message of only a role and a text whole (tool_formats.as_rendered)."""
    messages, history, kept = chosen['messages'], case.get('history'), chosen['turns']
    if 'tools' in case or len(messages) != 2 * len(kept) + 2 or '\n' in ''.join([*case['required'], *case['stale']]) \
            or messages[1:-1] != build_request(case, kept)[1:-1]:
        return facts_in(case, messages, counter)  # a message holding more than its role and text (a call) is read whole
    ends, kept = f'{message_text(messages[0])}\n{message_text(messages[-1])}', set(kept)
    return tuple([fact for fact in case[key] if not holders(history, fact).isdisjoint(kept) or fact in ends
                  or escape(fact) in ends] for key in ('required', 'stale'))


def holders(history: list, fact: str) -> frozenset[int]:
    """The turns holding a fact as facts_in finds it in the turn's messages alone, each fact searched once per
    conversation: in [{'user': 'a < b', 'assistant': 'ok'}, {'user': 'a &lt; b', ...}] 'a < b' is held by {0, 1}."""
    texts, joined, starts, known = turn_places(history)
    if (found := known.get(fact)) is None:
        found = known[fact] = frozenset(index for form in {fact, escape(fact)}
                                        for index in places(texts, joined, starts, form))
    return found


@per_history
def turn_places(history: list) -> tuple[list[str], str, list[int], dict]:
    """Each turn's text (its messages' texts, a newline between, as facts_in joins them), all of them joined by NUL,
    where each starts in that, and the holders found so far (fact -> turns)."""
    texts = ['\n'.join(turn_texts(turn)) for turn in history]
    return texts, '\0'.join(texts), [*accumulate((len(text) + 1 for text in texts), initial=0)], {}


def places(texts: list[str], joined: str, starts: list[int], form: str) -> list[int]:
    """The turns whose text holds `form`; found in the NUL-joined text, where a form without NUL lies in one turn."""
    if '\0' in form:
        return [index for index, text in enumerate(texts) if form in text]
    found, at = [], joined.find(form)
    while at >= 0:
        found.append(index := bisect_right(starts, at) - 1)
        at = joined.find(form, starts[index + 1])
    return found


def invalid(messages: list[dict]) -> str | None:
    """Why a provider would refuse this request (docs/agents.md), or None. The system message comes first and a user
    message next, the question last; an assistant message's calls are answered by the tool messages right after it,
    each once, a result answering the open call of its id, and no id is used again while a call of it is open (an id
    answered may come back, as real logs have it). [system, user, tool answering 'c1'] -> 'message 2 (tool) ...'."""
    roles = [message['role'] for message in messages]
    if roles[0] != 'system' or len(roles) < 2:
        return 'the system message is not first' if roles[0] != 'system' else 'the request holds no question'
    for index in (1, len(roles) - 1):  # the first after the system message, and the question
        if roles[index] != 'user':
            return f'message {index} is {roles[index]}, not a user message'
    open_calls = {}  # call id -> the message that made it, until a result answers it
    for index, message in enumerate(messages):
        if message['role'] != 'tool' and open_calls:
            call, at = next(iter(open_calls.items()))
            return f'message {at}: call {call!r} has no result before message {index} ({message["role"]})'
        if message['role'] == 'tool' and open_calls.pop(message['tool_call_id'], None) is None:
            return f'message {index} (tool) answers no call of the assistant message before it'
        for call in message.get('tool_calls', ()):
            if call['id'] in open_calls:
                return f'message {index}: call id {call["id"]!r} is used twice while unanswered'
            open_calls[call['id']] = index
    return None


def graded_row(case: dict, chosen: dict, counter: str | None = None) -> dict:
    """One report row: which required and stale facts reached the selection's request as `counter` renders it
    (facts_in; shapes.ROW_FIELDS; an agent case's row also says why its request is invalid, AGENT_ROW_FIELDS, and an
    invalid request reaches no fact)."""
    why = invalid(chosen['messages']) if 'tools' in case else None
    reached, stale = ([], []) if why else request_facts(case, chosen, counter)
    row = {'case': case['id'], 'split': case['split'], 'kind': case['kind'], 'turns': chosen['turns'],
           'notes': chosen['notes'], 'input_tokens': chosen['input_tokens'], 'invalid': why,
           'within_budget': chosen['input_tokens'] <= allowance(case), 'required_found': len(reached),
           'required_total': len(case['required']), 'stale_included': stale,
           'missing': [fact for fact in case['required'] if fact not in reached]}
    return {key: row[key] for key in (AGENT_ROW_FIELDS if 'tools' in case else ROW_FIELDS)}


def totals(rows: list[dict]) -> dict:
    """The figures of a group of graded rows: a rule's (RULE_TOTALS; AGENT_TOTALS if any row is an agent case's), or
    for rows of the best possible selection (they have no within_budget) BEST_TOTALS. A row not searched adds its facts
    to the total, as the rules' rows of that case do, but no facts found, complete case or tokens: rows of 1 of 1
    facts in 40 tokens, 0 of 2 in 51 and one not searched with 3 facts give facts_found 1 of 6, complete_cases 1,
    mean_input_tokens 45.5."""
    searched = [row for row in rows if row['turns'] is not None]
    tokens = [row['input_tokens'] for row in searched]
    found, facts = sum(row['required_found'] for row in searched), sum(row['required_total'] for row in rows)
    figures = {'cases': len(rows), 'not_searched': len(rows) - len(searched), 'facts_found': found,
               'facts_total': facts, 'fact_recall': round(found / facts, 3),
               'complete_cases': sum(1 for row in searched if not row['missing']),
               'cases_with_stale_facts': sum(1 for row in searched if row['stale_included']),
               'over_budget': sum(1 for row in searched if not row.get('within_budget', True)),
               'invalid_requests': sum(1 for row in searched if row.get('invalid')),
               'mean_input_tokens': round(sum(tokens) / len(tokens), 1) if tokens else None}
    # A case set may mix pair and agent cases: any agent row (it has invalid) gives the group the agent totals.
    kind = AGENT_TOTALS if any('invalid' in row for row in rows) else RULE_TOTALS if 'within_budget' in rows[0] \
        else BEST_TOTALS
    return {key: figures[key] for key in kind}


def by_group(rows: list[dict], group: str, figures=totals) -> dict:
    """figures() of the rows of each value of `group`: splits in SPLITS order, other groups in row order."""
    values = [split for split in SPLITS if any(row['split'] == split for row in rows)] if group == 'split' \
        else list(dict.fromkeys(row[group] for row in rows))
    return {value: figures([row for row in rows if row[group] == value]) for value in values}


def check_fits(path, cases: list[dict], count, hint: str = '') -> None:
    """Refuse the first case whose instructions and question alone exceed its allowance: no rule could fit it."""
    for case in cases:
        if (bare := count(build_request(case, []))) > allowance(case):
            raise LabError(f'{path}: case {case["id"]}: field budget allows {allowance(case)} input tokens, '
                           f'but the instructions and question alone need {bare}{hint}')


def check_additive(case: dict, whole: int, parts: int) -> None:
    """Refuse a request counted whole to other than the sum of the parts a rule or search decided by."""
    if whole != parts:
        raise LabError(f'case {case["id"]}: the request was counted {parts} tokens as it was built and '
                       f'{whole} whole; the counter cannot be summed turn by turn')
