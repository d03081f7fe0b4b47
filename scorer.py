"""How a request is scored: which facts reach it, by exact text, and what graded rows add up to.

    from scorer import facts_in, graded_row, totals
    facts_in(case, messages)        # (required facts in the messages, stale facts in them)
    graded_row(case, selection)     # one report row (ROW_FIELDS), graded as the chosen counter renders it
    totals(rows)                    # a rule's figures (TOTALS['rule']), or the best possible's
    memory_row(question, lines, memory_tokens, input_tokens), memory_totals(rows)   # memory_eval.py's

Every row and every group's figures are made here, each laid out by a tuple of its fields under its own name
(ROW_FIELDS ... MEMORY_TOTALS), never cut from another by position: what a row holds, and in which order, is here.

A fact reaches a request when it appears, character for character, in one of its messages' texts
(shapes.message_text: the content, and a call's name and arguments), or as the notes block quotes it (shapes.escape);
only what the chosen counter's template writes counts (tool_formats.as_rendered: Llama 3's drops an assistant's text
beside a call); an invalid request (tool_formats.invalid) carries none. It reads the request, never a reply, and
calls no model. It only grades: the checks every run makes, that a case's bare request fits (case_set.check_fits) and
that a count is the sum of its parts (strategies.check_additive), live with what they check. It reads, prints and
writes nothing.
"""
from bisect import bisect_right
from itertools import accumulate

from shapes import SPLITS, allowance, build_request, escape, is_agent, message_text, per_history, turn_texts
from tokenizer import SELECTED
from tool_formats import as_rendered, invalid

# The layouts, in the order a report writes the fields. A graded row: a rule's, and on an agent case also why its
# request is invalid (null when valid); the best possible selection's, which takes BEST_GRADED from graded_row.
ROW_FIELDS = ('case', 'split', 'kind', 'turns', 'notes', 'input_tokens', 'within_budget', 'required_found',
              'required_total', 'missing', 'stale_included')
AGENT_ROW_FIELDS = ('case', 'split', 'kind', 'turns', 'notes', 'input_tokens', 'within_budget', 'invalid',
                    'required_found', 'required_total', 'missing', 'stale_included')
BEST_GRADED = ('turns', 'input_tokens', 'required_found', 'required_total', 'missing', 'stale_included')
BEST_ROW_FIELDS = ('case', 'split', 'kind', 'history_turns', 'fact_turns', 'stale_turns', *BEST_GRADED, 'not_searched')
MEMORY_ROW_FIELDS = ('question', 'user', 'split', 'kind', 'lines', 'memory_tokens', 'input_tokens', 'within_budget',
                     'required_found', 'required_total', 'missing', 'useful_lines', 'stale_lines', 'forgotten_lines',
                     'stale_included')  # one question's memory block (memory_eval.py)
# A group's figures by the kind of its rows (row_kind): as evaluate.py's summary writes them, and as
# budget_sweep.py's points do (the best possible's over_budget null there: its rows have no budget check).
TOTALS = {'rule': ('cases', 'facts_found', 'facts_total', 'fact_recall', 'complete_cases', 'cases_with_stale_facts',
                   'over_budget', 'mean_input_tokens'),
          'agent': ('cases', 'facts_found', 'facts_total', 'fact_recall', 'complete_cases', 'cases_with_stale_facts',
                    'over_budget', 'invalid_requests', 'mean_input_tokens'),
          'best': ('cases', 'not_searched', 'facts_found', 'facts_total', 'complete_cases', 'cases_with_stale_facts',
                   'mean_input_tokens')}
POINT_TOTALS = {'rule': ('cases', 'facts_found', 'facts_total', 'complete_cases', 'cases_with_stale_facts',
                         'mean_input_tokens', 'over_budget'),
                'agent': ('cases', 'facts_found', 'facts_total', 'complete_cases', 'cases_with_stale_facts',
                          'mean_input_tokens', 'over_budget', 'invalid_requests'),
                'best': ('cases', 'facts_found', 'facts_total', 'complete_cases', 'cases_with_stale_facts',
                         'mean_input_tokens', 'over_budget', 'not_searched')}
MEMORY_TOTALS = ('questions', 'required_found', 'required_total', 'recall', 'lines', 'useful_lines', 'usefulness',
                 'stale_lines', 'forgotten_lines', 'mean_memory_tokens', 'mean_input_tokens', 'over_budget')


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
    if is_agent(case) or len(messages) != 2 * len(kept) + 2 or '\n' in ''.join([*case['required'], *case['stale']]) \
            or messages[1:-1] != build_request(case, kept)[1:-1]:
        return facts_in(case, messages, counter)  # a message holding more than its role and text (a call) is read whole
    ends, kept = f'{message_text(messages[0])}\n{message_text(messages[-1])}', set(kept)
    return tuple([fact for fact in case[key] if not holders(history, fact).isdisjoint(kept) or fact in ends
                  or escape(fact) in ends] for key in ('required', 'stale'))


def holders(history: list, fact: str) -> frozenset[int]:
    """The turns holding a fact as facts_in finds it in the turn's messages alone, each fact searched once per
    conversation: in [{'user': 'a < b', 'assistant': 'ok'}, {'user': 'a &lt; b', ...}] 'a < b' is held by {0, 1}."""
    texts, joined, starts, known = searchable_turns(history)
    if (found := known.get(fact)) is None:
        found = known[fact] = frozenset(index for form in {fact, escape(fact)}
                                        for index in places(texts, joined, starts, form))
    return found


@per_history
def searchable_turns(history: list) -> tuple[list[str], str, list[int], dict]:
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


def graded_row(case: dict, chosen: dict, counter: str | None = None) -> dict:
    """One report row: which required and stale facts reached the selection's request as `counter` renders it
    (facts_in; ROW_FIELDS; an agent case's row also says why its request is invalid, AGENT_ROW_FIELDS, and an
    invalid request reaches no fact)."""
    why = invalid(chosen['messages']) if is_agent(case) else None
    row = {'case': case['id'], 'split': case['split'], 'kind': case['kind'], 'turns': chosen['turns'],
           'notes': chosen['notes'], 'invalid': why,
           **grades(case, ([], []) if why else request_facts(case, chosen, counter), chosen['input_tokens'])}
    return {key: row[key] for key in (AGENT_ROW_FIELDS if is_agent(case) else ROW_FIELDS)}


def memory_row(question: dict, lines: list[str], memory_tokens: int, input_tokens: int) -> dict:
    """One question's row (MEMORY_ROW_FIELDS): which facts its memory block holds, line by line, by exact text."""
    def holding(facts: list[str]) -> list[str]:
        return [line for line in lines if any(fact in line for fact in facts)]

    reached = facts_in(question, [{'role': 'user', 'content': line} for line in lines])  # as a request is graded
    row = {'question': question['id'], 'user': question['user'], 'split': question['split'],
           'kind': question['kind'], 'lines': len(lines), 'memory_tokens': memory_tokens,
           **grades(question, reached, input_tokens), 'useful_lines': len(holding(question['required'])),
           'stale_lines': len(holding(question['stale'])), 'forgotten_lines': len(holding(question['forgotten']))}
    return {key: row[key] for key in MEMORY_ROW_FIELDS}


def grades(case: dict, reached: tuple[list[str], list[str]], input_tokens: int) -> dict:
    """What every row says of the facts that reached a request (facts_in's pair) and of its size."""
    found, stale = reached
    return {'input_tokens': input_tokens, 'within_budget': input_tokens <= allowance(case),
            'required_found': len(found), 'required_total': len(case['required']),
            'missing': [fact for fact in case['required'] if fact not in found], 'stale_included': stale}


def totals(rows: list[dict], layouts: dict = TOTALS) -> dict:
    """The figures of a group of graded rows, laid out as layouts[row_kind(rows)]: TOTALS, or POINT_TOTALS. A row not
    searched adds its facts to the total, as the rules' rows of that case do, but no facts found, complete case or
    tokens: rows of 1 of 1 facts in 40 tokens, 0 of 2 in 51 and one not searched with 3 facts give facts_found 1 of
    6, complete_cases 1, mean_input_tokens 45.5."""
    searched, kind = [row for row in rows if row['turns'] is not None], row_kind(rows)
    found, facts = sum(row['required_found'] for row in searched), sum(row['required_total'] for row in rows)
    figures = {'cases': len(rows), 'not_searched': len(rows) - len(searched), 'facts_found': found,
               'facts_total': facts, 'fact_recall': share(found, facts),
               'complete_cases': sum(1 for row in searched if not row['missing']),
               'cases_with_stale_facts': sum(1 for row in searched if row['stale_included']),
               'over_budget': None if kind == 'best' else sum(1 for row in searched if not row['within_budget']),
               'invalid_requests': sum(1 for row in searched if row.get('invalid')),
               'mean_input_tokens': mean([row['input_tokens'] for row in searched])}
    return {key: figures[key] for key in layouts[kind]}


def row_kind(rows: list[dict]) -> str:
    """'agent' if any row is an agent case's (it has invalid: a case set may mix pair and agent cases), else 'rule'
    for a rule's rows, or 'best' for the best possible selection's (they have no within_budget)."""
    return 'agent' if any('invalid' in row for row in rows) else 'rule' if 'within_budget' in rows[0] else 'best'


def memory_totals(rows: list[dict]) -> dict:
    """A fill's figures over its rows (MEMORY_TOTALS): recall 5 of 8 -> 0.625; usefulness 5 useful lines of 10 ->
    0.5."""
    figures = {'questions': len(rows), **{key: sum(row[key] for row in rows) for key in (
        'required_found', 'required_total', 'lines', 'useful_lines', 'stale_lines', 'forgotten_lines')},
        'mean_memory_tokens': mean([row['memory_tokens'] for row in rows]),
        'mean_input_tokens': mean([row['input_tokens'] for row in rows]),
        'over_budget': sum(1 for row in rows if not row['within_budget'])}
    figures |= {'recall': share(figures['required_found'], figures['required_total']),
                'usefulness': share(figures['useful_lines'], figures['lines'])}
    return {key: figures[key] for key in MEMORY_TOTALS}


def share(part: int, whole: int) -> float | None:
    """part of whole to 3 decimals, None of nothing: share(1, 3) -> 0.333."""
    return round(part / whole, 3) if whole else None


def mean(values: list[int]) -> float | None:
    """The mean to 1 decimal, None of no values: mean([40, 51]) -> 45.5."""
    return round(sum(values) / len(values), 1) if values else None


def by_group(rows: list[dict], group: str, figures=totals) -> dict:
    """figures() of the rows of each value of `group`: splits in SPLITS order, other groups in row order."""
    values = [split for split in SPLITS if any(row['split'] == split for row in rows)] if group == 'split' \
        else list(dict.fromkeys(row[group] for row in rows))
    return {value: figures([row for row in rows if row[group] == value]) for value in values}
