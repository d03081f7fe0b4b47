"""The best any selection of whole turns could do: an exact search that reads the fact labels.

    from best_possible import search
    search({0: (14, frozenset({'a'})), 2: (9, frozenset({'a'}))}, room=20)   # -> [2]

evaluate.py and budget_sweep.py run it for every case; what it picks and how: docs/reviewing.md. It reads the
labels, so it is no rule: not in strategies.RULES, never sent by answer_check.py, and no rule may take its name.
Beyond MAX_CANDIDATES fact-holding stale-free turns it does not search, and says so. Which turn holds which fact
is the report's own grader's word (scorer.facts_in), every cost the counter's (strategies.costs). It prints and
writes nothing.
"""
from itertools import accumulate

from scorer import BEST_GRADED, facts_in, graded_row, holders
from shapes import allowance, build_request, is_agent, turn_messages
from strategies import chosen, costs

MAX_CANDIDATES = 20  # fact-holding stale-free turns searched exactly (2**20 subsets at most); beyond: not searched
LABEL = 'best possible (reads the labels)'  # its name in the table, the turn map and --show
BEST = 'best possible'  # its name in the sweep's points and in --compare, and one no rule may take


def search(candidates: dict[int, tuple[int, frozenset]], room: int) -> list[int]:
    """The best set of turn indices, given each candidate turn's (token cost, facts it adds) and the room left; a set
    costs the sum of its turns. Most facts first, then fewest tokens, then earliest turns:
    search({0: (14, frozenset({'a'})), 1: (30, frozenset({'b'})), 2: (9, frozenset({'a'}))}, 40) -> [1, 2];
    search({0: (50, frozenset({'a'}))}, 40) -> []"""
    if len(candidates) > MAX_CANDIDATES:
        raise ValueError(f'{len(candidates)} candidate turns; the exact search stops at {MAX_CANDIDATES}')
    order = sorted(candidates)
    # Facts still reachable from position i onwards: a branch that cannot reach the best count is cut.
    reachable = [*accumulate((candidates[index][1] for index in reversed(order)), frozenset.union,
                             initial=frozenset())][::-1]
    best = [(0, 0, ())]  # (-facts, tokens, turns): smaller is better

    # Depth first, taking a turn before leaving it out, visits the sets in increasing order of their
    # sorted turns, so a set visited later never wins a full tie: a branch that cannot carry more facts
    # than the best so far, and already costs as much, is cut (past the last turn, every branch is).
    def visit(position: int, chosen: tuple, cost: int, facts: frozenset) -> None:
        best[0] = min(best[0], (-len(facts), cost, chosen))
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
    ({1: frozenset({'Switch to PostgreSQL instead of MySQL.'})}, {0: frozenset({'We will use MySQL'})})"""
    if not is_agent(case):  # a pair turn's facts are found once per conversation
        return tuple(by_turn({fact: holders(case['history'], fact) for fact in case[kind]})
                     for kind in ('required', 'stale'))
    turns = list(map(turn_messages, case['history']))  # as build_request lays them out, oldest first
    messages, starts = [message for turn in turns for message in turn], list(accumulate(map(len, turns), initial=0))
    held = {}  # index -> (required facts, stale facts) of each turn holding either

    # Grade a run of turns at once and split only runs that hold a fact: a long history with a few
    # fact-holding turns costs a few dozen gradings, not one per turn. A fact is a turn's only if
    # the grader finds it in that turn alone.
    def visit(first: int, end: int) -> None:
        reached, sent = facts_in(case, messages[starts[first]:starts[end]])
        if (reached or sent) and end - first == 1:
            held[first] = reached, sent
        elif reached or sent:
            visit(first, (first + end) // 2)
            visit((first + end) // 2, end)

    visit(0, len(turns))
    return tuple({index: frozenset(facts[kind]) for index, facts in held.items() if facts[kind]} for kind in (0, 1))


def by_turn(turns_of: dict[str, frozenset]) -> dict[int, frozenset]:
    """Fact -> its turns, as turn -> its facts, in the order facts were given: by_turn({'a': {2}, 'b': {0, 2}}) ->
    {0: frozenset({'b'}), 2: frozenset({'a', 'b'})}"""
    held = {}
    for fact, turns in turns_of.items():
        for index in turns:
            held.setdefault(index, []).append(fact)
    return {index: frozenset(held[index]) for index in sorted(held)}


def best_row(case: dict, count, facts: tuple | None = None) -> dict:
    """The best-possible report row of a case: search() over its fact-holding, stale-free turns, counted, checked and
    graded like a rule's. `facts`: turn_facts(case), which budget_sweep.py works out once for all its budgets."""
    required, stale = facts if facts is not None else turn_facts(case)
    row = {'case': case['id'], 'split': case['split'], 'kind': case['kind'],
           'history_turns': len(case['history']), 'fact_turns': sorted(required), 'stale_turns': sorted(stale)}
    candidates = [index for index in sorted(required) if index not in stale]
    if len(candidates) > MAX_CANDIDATES:  # turns ... stale_included unknown, but not the case's facts
        return {**row, **dict.fromkeys(BEST_GRADED), 'required_total': len(case['required']),
                'not_searched': f'{len(candidates)} fact-holding turns without a stale fact; '
                                f'the exact search stops at {MAX_CANDIDATES}'}
    bare, cost = parts = costs(case, count)
    # A fact the instructions or the question already carry is no gain for any turn.
    already = frozenset(facts_in(case, build_request(case, []))[0])
    kept = search({index: (cost[index], required[index] - already) for index in candidates}, allowance(case) - bare)
    graded = graded_row(case, chosen(case, count, kept, parts=parts))
    return {**row, **{key: graded[key] for key in BEST_GRADED}, 'not_searched': None}
