"""The best any selection of whole turns could do: an exact search that reads the fact labels.

    from best_possible import search
    search({0: (14, frozenset({'a'})), 2: (9, frozenset({'a'}))}, room=20)   # -> [2]

evaluate.py and budget_sweep.py run it for every case; what it picks and how: docs/reviewing.md. It reads the
labels, so it is no rule: not in strategies.RULES, never sent by answer_check.py, and no rule may take its name.
Beyond MAX_CANDIDATES fact-holding stale-free turns it does not search, and says so. Which turn holds which fact
is the report's own grader's word (case_set.grade), every cost the counter's (strategies.costs). It prints and
writes nothing.
"""
from case_set import grade
from common import LabError, allowance
from strategies import build_request, costs
from tokenizer import count_request

MAX_CANDIDATES = 20  # fact-holding stale-free turns searched exactly (2**20 subsets at most); beyond: not searched
LABEL = 'best possible (reads the labels)'  # its name in the table, the turn map and --show


def search(candidates: dict[int, tuple[int, frozenset]], room: int) -> list[int]:
    """The best set of turn indices, given each candidate turn's (token cost, facts it adds) and the room left.

    A set costs the sum of its turns. Most facts first, then fewest tokens, then earliest turns:
    search({0: (14, frozenset({'a'})), 1: (30, frozenset({'b'})), 2: (9, frozenset({'a'}))}, 40) -> [1, 2]
    search({0: (50, frozenset({'a'}))}, 40) -> []
    """
    if len(candidates) > MAX_CANDIDATES:
        raise ValueError(f'{len(candidates)} candidate turns; the exact search stops at {MAX_CANDIDATES}')
    order = sorted(candidates)
    # Facts still reachable from position i onwards: a branch that cannot reach the best count is cut.
    reachable = [frozenset()] * (len(order) + 1)
    for position in range(len(order) - 1, -1, -1):
        reachable[position] = reachable[position + 1] | candidates[order[position]][1]
    best = [(0, 0, ())]  # (-facts, tokens, turns): smaller is better

    # Depth first, taking a turn before leaving it out, visits the sets in increasing order of their
    # sorted turns, so a set visited later never wins a full tie: a branch that cannot carry more facts
    # than the best so far, and already costs as much, is cut.
    def visit(position: int, chosen: tuple, cost: int, facts: frozenset) -> None:
        best[0] = min(best[0], (-len(facts), cost, chosen))
        if position == len(order):
            return
        bound, most = len(facts | reachable[position]), -best[0][0]
        if bound < most or (bound == most and cost >= best[0][1]):
            return
        index = order[position]
        extra, adds = candidates[index]
        if cost + extra <= room:
            visit(position + 1, chosen + (index,), cost + extra, facts | adds)
        visit(position + 1, chosen, cost, facts)

    visit(0, (), 0, frozenset())
    return list(best[0][2])


def turn_facts(case: dict) -> tuple[dict[int, frozenset], dict[int, frozenset]]:
    """For each turn holding facts: index -> the required facts it holds, and index -> the stale facts it holds.

    For dev-correction (required 'Switch to PostgreSQL instead of MySQL.', stale 'We will use MySQL'):
    ({1: frozenset({'Switch to PostgreSQL instead of MySQL.'})}, {0: frozenset({'We will use MySQL'})})
    """
    messages = build_request(case, range(len(case['history'])))[1:-1]  # without instructions and question
    required, stale = {}, {}

    # Grade a run of turns at once and split only runs that hold a fact: a long history with a few
    # fact-holding turns costs a few dozen gradings, not one per turn. A fact is a turn's only if
    # the grader finds it in that turn alone.
    def visit(first: int, end: int) -> None:
        row = grade(case, {'messages': messages[2 * first:2 * end], 'turns': list(range(first, end)), 'notes': 0,
                           'input_tokens': 0})
        if not row['required_found'] and not row['stale_included']:
            return
        if end - first > 1:
            visit(first, (first + end) // 2)
            visit((first + end) // 2, end)
            return
        if row['required_found']:
            required[first] = frozenset(fact for fact in case['required'] if fact not in row['missing'])
        if row['stale_included']:
            stale[first] = frozenset(row['stale_included'])

    if messages:
        visit(0, len(case['history']))
    return required, stale


def best_row(case: dict, count=count_request, facts: tuple | None = None) -> dict:
    """The best-possible report row of a case: search() over its fact-holding, stale-free turns, counted and graded
    like a rule's; a count off the predicted sum stops the run. `facts` is turn_facts(case) if the caller has it:
    it does not depend on the budget, so budget_sweep.py works it out once per case."""
    required, stale = facts if facts is not None else turn_facts(case)
    row = {'case': case['id'], 'split': case['split'], 'kind': case['kind'],
           'history_turns': len(case['history']), 'fact_turns': sorted(required), 'stale_turns': sorted(stale)}
    candidates = [index for index in sorted(required) if index not in stale]
    if len(candidates) > MAX_CANDIDATES:
        row.update(turns=None, input_tokens=None, required_found=None, required_total=len(case['required']),
                   missing=None, stale_included=None,
                   not_searched=f'{len(candidates)} fact-holding turns without a stale fact; '
                                f'the exact search stops at {MAX_CANDIDATES}')
        return row
    bare, cost = costs(case, count)
    # A fact the instructions or the question already carry is no gain for any turn.
    carried = grade(case, {'messages': build_request(case, []), 'turns': [], 'notes': 0, 'input_tokens': bare})
    already = frozenset(case['required']) - frozenset(carried['missing'])
    kept = search({index: (cost[index], required[index] - already) for index in candidates}, allowance(case) - bare)
    request = build_request(case, kept)
    graded = grade(case, {'messages': request, 'turns': kept, 'notes': 0, 'input_tokens': count(request)})
    if graded['input_tokens'] != bare + sum(cost[index] for index in kept):
        raise LabError(f'case {case["id"]}: the counter is not additive over turns here, '
                       'so the best possible selection cannot be searched exactly')
    row.update({key: graded[key] for key in ('turns', 'input_tokens', 'required_found', 'required_total',
                                             'missing', 'stale_included')}, not_searched=None)
    return row


def best_totals(rows: list[dict]) -> dict:
    """Totals of best-possible rows, in any grouping. A row not searched adds its facts to the total, as the rules'
    rows of that case do, but no facts found, complete case or tokens: rows of 1 of 1 facts in 40 tokens, 0 of 2
    in 51 and one not searched with 3 facts give facts_found 1 of 6, complete_cases 1, mean_input_tokens 45.5."""
    searched = [row for row in rows if row['turns'] is not None]
    tokens = [row['input_tokens'] for row in searched]
    return {'cases': len(rows), 'not_searched': len(rows) - len(searched),
            'facts_found': sum(row['required_found'] for row in searched),
            'facts_total': sum(row['required_total'] for row in rows),
            'complete_cases': sum(1 for row in searched if not row['missing']),
            'cases_with_stale_facts': sum(1 for row in searched if row['stale_included']),
            'mean_input_tokens': round(sum(tokens) / len(tokens), 1) if tokens else None}

