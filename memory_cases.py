"""Write the memory lab's cases, and read them back checked (docs/memory.md).

    .venv/bin/python memory_cases.py                      # rewrites memory-cases.json beside this script
    .venv/bin/python memory_cases.py --output other.json
    from memory_cases import load_memory_cases            # the checked cases, or one CaseError line

It writes memory-cases.json (or --output), the same bytes every run, from the data below: three users' memory
events (remember, replace or forget an exact fact at a time), ten questions each with the facts it needs (required),
those replaced before it (stale) and those the user asked to forget before it (forgotten), and a 200-turn replay of
a fourth user's events for storage growth (a set of one's own may leave the replay out). The loader refuses, in one
line naming file, user, question or event and field, what could make a result lie: a fact no event states, a replace
or forget of a fact not current then (a forget also ends every fact of the user holding its text, as the managed
store deletes them), a question asked before its facts exist, and what cases.json refuses; and what would not end:
a time past MAX_TIME, a replay of more than MAX_REPLAY_TURNS turns. It stores and counts nothing, calls no model.
"""
import argparse
from pathlib import Path

from case_set import BUDGET_KINDS, CaseError, check_budget, check_encodable
from common import HERE, run  # standard library only, as are the five below
from lab_files import (ANY, OBJECT, POSITIVE, STRING, TEXT, at_most, check_fields, check_outputs, list_of, one_of,
                       read_json_file, to_json, write_output)
from memory_store import MAX_TIME
from shapes import SPLITS
from tool_formats import refuse_thinking

# What a memory case set is. Changing any of these changes which files are accepted.
TOP = {'instructions': TEXT, 'users': (lambda v: isinstance(v, dict) and v != {}, 'a non-empty object of user names '
                                       'and their events'),
       'questions': (lambda v: isinstance(v, list) and v != [], 'a non-empty list of questions'), 'replay': OBJECT}
MAX_REPLAY_TURNS = 1_000  # a replay's most turns, so events (each a write to disk, about 20 ms here) and samples
REPLAY = {'user': TEXT, 'turns': at_most(MAX_REPLAY_TURNS), 'events': ANY}
DISTINCT_FACTS = list_of(STRING, 'a list of distinct facts (strings)', distinct=True)
QUESTION = {'id': TEXT, 'user': TEXT, 'time': at_most(MAX_TIME), 'split': one_of(SPLITS), 'kind': TEXT,
            'question': TEXT, **dict.fromkeys(('required', 'stale', 'forgotten'), DISTINCT_FACTS),
            'facts_quota': POSITIVE, 'budget': BUDGET_KINDS}
ACTIONS = ('remember', 'replace', 'forget')
EVENT = {'action': one_of(ACTIONS), 'fact': TEXT, 'replaces': TEXT}  # after its time or turn; replaces: a replace's
PAST = {'replace': 'replaced', 'forget': 'forgotten'}  # a fact's status after each action that ends it
MEMORY_CASES = HERE / 'memory-cases.json'  # the case set main writes by default and memory_eval reads
LABELS = {'required': 'current', 'stale': 'replaced', 'forgotten': 'forgotten'}  # what each list's facts must be

# What is measured. Changing any of these changes memory-cases.json and every figure of memory-result.json.
MEMORY_INSTRUCTIONS = ('You are an assistant with a memory of facts about the user. Answer from the memory block '
                       'only; if it does not hold what the question needs, say that you do not know it.')
MEMORY_BUDGET = {'context_limit': 512, 'max_new_tokens': 96, 'margin': 32}
FACTS_QUOTA = 64  # tokens of memory lines a block may hold: less than every fact append-only stores for ana
ANA_PHONE, ANA_PORTO, ANA_LISBON = ("Ana's phone number is 555-0142", "Ana's home city is Porto",
                                   "Ana's home city is Lisbon")
ANA_EMAIL, ANA_TEAM = ("Ana's work email is ana.souza@example.com", 'Ana is on the Design Systems team')
ANA_DIET = ['Ana is vegetarian', 'Ana is allergic to peanuts']
BOB_DESK, BOB_MANAGER, BOB_HALAL = ("Bob's desk is 3-114, by the north window", "Bob's manager is Priya Shah",
                                   'Bob eats only halal food')
BOB_PAYMENTS, BOB_FRAUD, BOB_SHELLFISH = ('Bob is on the Payments team', 'Bob is on the Fraud Detection team',
                                          'Bob is allergic to shellfish')
CLEO_NAME, CLEO_DIET = ('Cleo prefers to be called Cleo, never Cleopatra', 'Cleo is lactose intolerant')
CLEO_KWAME = "Cleo's emergency contact is Kwame Mensah, 555-0199"
CLEO_TOM, CLEO_INES, CLEO_OLD_DESK, CLEO_DESK = ("Cleo's manager is Tom Baker", "Cleo's manager is Ines Moreau",
                                                 "Cleo's desk is 2-031", "Cleo's desk is 5-210, near the lifts")
# Each user's events: (time, action, fact) or (time, 'replace', new fact, the fact it replaces).
EVENTS = {
    'ana': [(1, 'remember', ANA_PHONE), (2, 'remember', ANA_PORTO), (3, 'remember', ANA_DIET[0]),
            (4, 'remember', "Ana's manager is Rui Costa"), (5, 'remember', ANA_EMAIL),
            (8, 'replace', ANA_LISBON, ANA_PORTO), (9, 'remember', 'Ana prefers to be called Annie'),
            (11, 'forget', ANA_PHONE), (12, 'remember', ANA_DIET[1]), (14, 'remember', ANA_TEAM)],
    'bob': [(1, 'remember', BOB_MANAGER), (2, 'remember', BOB_DESK), (3, 'remember', BOB_PAYMENTS),
            (4, 'remember', BOB_SHELLFISH), (5, 'remember', BOB_HALAL), (7, 'replace', BOB_FRAUD, BOB_PAYMENTS),
            (8, 'remember', 'Bob lives in Leeds'), (10, 'forget', BOB_SHELLFISH),
            (11, 'remember', 'Bob works from home on Fridays')],
    'cleo': [(1, 'remember', CLEO_NAME), (2, 'remember', 'Cleo lives in Accra'), (3, 'remember', CLEO_TOM),
             (4, 'remember', 'Cleo is on the Platform team'), (5, 'remember', CLEO_OLD_DESK),
             (6, 'remember', CLEO_KWAME), (8, 'replace', CLEO_INES, CLEO_TOM), (9, 'remember', CLEO_DIET),
             (10, 'replace', CLEO_DESK, CLEO_OLD_DESK), (12, 'forget', CLEO_KWAME),
             (13, 'remember', 'Cleo is learning Portuguese')],
}
# Each question: (id, user, time, split, kind, question, required, stale, forgotten). The desk approval is the
# seed's question done right: Bob's manager is named, no fact grants approval, so only what is stated is required.
QUESTIONS = [
    ('ana-city', 'ana', 15, 'dev', 'replaced fact', 'Which city is my home now?', [ANA_LISBON], [ANA_PORTO], []),
    ('ana-city-before-move', 'ana', 6, 'held_out', 'before a change', 'Which city is my home?', [ANA_PORTO], [], []),
    ('ana-contact', 'ana', 15, 'dev', 'forgotten fact', 'Which phone number or email should the courier use to reach '
     'me?', [ANA_EMAIL], [], [ANA_PHONE]),
    ('ana-lunch', 'ana', 15, 'held_out', 'several facts', 'I am ordering my lunch for the offsite; what should the '
     'caterer know?', ANA_DIET, [], []),
    ('bob-desk-approval', 'bob', 12, 'dev', 'no fact answers it', 'Who has to approve moving my desk?',
     [BOB_DESK, BOB_MANAGER], [], []),
    ('bob-standup', 'bob', 12, 'held_out', 'replaced fact', 'Which team standup do I join?', [BOB_FRAUD],
     [BOB_PAYMENTS], []),
    ('bob-dinner', 'bob', 12, 'dev', 'forgotten fact', 'What should the restaurant know about my food for the team '
     'dinner?', [BOB_HALAL], [], [BOB_SHELLFISH]),
    ('cleo-name', 'cleo', 14, 'held_out', 'oldest fact', 'What name goes on my welcome card?', [CLEO_NAME], [], []),
    ('cleo-desk-manager', 'cleo', 14, 'dev', 'two replaced facts', 'Where is my desk, and who is my manager now?',
     [CLEO_DESK, CLEO_INES], [CLEO_OLD_DESK, CLEO_TOM], []),
    ('cleo-emergency', 'cleo', 14, 'held_out', 'forgotten fact', 'Who should the office call in an emergency, and '
     'what do they know about my diet?', [CLEO_DIET], [], [CLEO_KWAME]),
]
REPLAY_USER, REPLAY_TURNS, REPLAY_TICKETS = 'dan', 200, 24  # 24 remembers, 24 replaces, 12 forgets: 60 events


def replay_events() -> list[dict]:
    """Dan's events, one every 3 or 4 turns: each ticket is remembered opened, then replaced by 'in review', and
    every other one forgotten, so the managed store ends with fewer facts than the append-only one stores."""
    events = []
    for ticket in range(REPLAY_TICKETS):
        opened, review = (f'Dan is tracking ticket OPS-{101 + ticket}, {stage}' for stage in ('opened', 'in review'))
        events += [('remember', opened), ('replace', review, opened), *[('forget', review)] * (ticket % 2 == 0)]
    return [dict(zip(('turn', *EVENT), (1 + index * 10 // 3, *event))) for index, event in enumerate(events)]


def memory_cases() -> dict:
    """The case set memory_cases.py writes, in the order of its keys."""
    return {'instructions': MEMORY_INSTRUCTIONS,
            'users': {user: [dict(zip(('time', *EVENT), event)) for event in events]
                      for user, events in EVENTS.items()},
            'questions': [dict(zip(QUESTION, question), facts_quota=FACTS_QUOTA, budget=dict(MEMORY_BUDGET))
                          for question in QUESTIONS],
            'replay': {'user': REPLAY_USER, 'turns': REPLAY_TURNS, 'events': replay_events()}}


def check_text(where: str, name: str, value: str, fact: bool = False) -> str:
    """A string the counter can count; a fact is also one line, as the memory block holds it."""
    check_encodable(where, [(name, value)])
    refuse_thinking(f'{where}: field {name}', value, CaseError)
    if fact and value.splitlines() != [value]:
        raise CaseError(f'{where}: field {name} holds a line break; a fact is one line of the memory block')
    return value


def status(history: dict[str, list], fact: str, time: int) -> str:
    """A fact's status after the events up to and including `time`: current, replaced, forgotten, not yet stated."""
    changes = [state for at, state in history.get(fact, ()) if at <= time]
    return changes[-1] if changes else 'not yet stated'


def check_events(where: str, events, clock: str) -> dict[str, list]:
    """Each fact a user's events state, with its (time, status) after each event that touched it:
    remember 'A' at 1, replace it with 'B' at 4 -> {'A': [(1, 'current'), (4, 'replaced')], 'B': [(4, 'current')]}."""
    if not isinstance(events, list) or not events:
        raise CaseError(f'{where}: the events must be a non-empty list of events')
    history, time = {}, 0
    for index, event in enumerate(events):
        at = f'{where}: event {index}'
        action = event.get('action') if isinstance(event, dict) else None
        spec = {clock: at_most(MAX_TIME), **EVENT}
        check_fields(at, event, dict(list(spec.items())[:3 + (action == 'replace')]), error=CaseError)
        if event[clock] <= time:
            raise CaseError(f"{at}: field {clock} is {event[clock]}, not after the previous event's {time}")
        time, fact = event[clock], check_text(at, 'fact', event['fact'], fact=True)
        old = check_text(at, 'replaces', event['replaces'], fact=True) if action == 'replace' else fact
        if action != 'forget' and status(history, fact, time) == 'current':
            raise CaseError(f'{at}: field fact: fact {fact!r} is already current at {clock} {time}')
        if action != 'remember':
            if (found := status(history, old, time)) != 'current':
                raise CaseError(f"{at}: field {'replaces' if action == 'replace' else 'fact'}: fact {old!r} is "
                                f"{found if old in history else 'never remembered'} at {clock} {time}; only a "
                                f'current fact can be {PAST[action]}')
            history[old].append((time, PAST[action]))
        if action == 'forget':  # as the managed store does: every other fact holding its text goes with it
            for other in history:
                if fact in other and other != fact and status(history, other, time) != 'forgotten':
                    history[other].append((time, 'forgotten'))
        if action != 'forget':
            history.setdefault(fact, []).append((time, 'current'))
    return history


def check_question(where: str, question, histories: dict[str, dict]) -> None:
    check_fields(where, question, {**QUESTION, 'user': one_of(tuple(histories))}, error=CaseError)
    for name in ('id', 'user', 'split', 'kind', 'question'):
        check_text(where, name, question[name])
    user, time = question['user'], question['time']
    check_budget(where, question['budget'])
    for name, wanted in LABELS.items():
        for fact in question[name]:
            if fact not in histories[user]:
                raise CaseError(f'{where}: field {name}: fact {fact!r} is stated by no event of user {user}')
            if (found := status(histories[user], fact, time)) != wanted:
                raise CaseError(f'{where}: field {name}: fact {fact!r} is {found} at time {time}; a {name} fact '
                                f'must be {wanted} then')
    if not question['required']:
        raise CaseError(f'{where}: field required is empty; a question needs at least one required fact')


def check_memory_cases(where: str, data) -> dict:
    """The case set, once every check passes; else CaseError for the first mistake, `where` naming the file."""
    check_fields(where, data, TOP, optional=['replay'], error=CaseError)
    check_text(where, 'instructions', data['instructions'])
    histories = {user: check_events(f'{where}: user {user}', events, 'time') for user, events in data['users'].items()}
    seen = set()
    for index, question in enumerate(data['questions']):
        named = isinstance(question, dict) and isinstance(question.get('id'), str) and question['id'].strip()
        at = f'{where}: question {question["id"] if named else f"at index {index}"}'
        check_question(at, question, histories)
        if question['id'] in seen:
            raise CaseError(f'{at}: field id is a duplicate; every question id must be unique')
        seen.add(question['id'])
    if 'replay' in data:
        check_replay(f'{where}: replay', data['replay'])
    return data


def check_replay(where: str, replay) -> None:
    """A replay: a user, its number of turns, and its events, each at a turn within them."""
    turns = check_fields(where, replay, REPLAY, error=CaseError)['turns']
    check_text(where, 'user', replay['user'])
    check_events(where, replay['events'], 'turn')
    if (last := replay['events'][-1]['turn']) > turns:
        raise CaseError(f'{where}: event {len(replay["events"]) - 1}: field turn is {last}, past the '
                        f"replay's {turns} turns")


def load_memory_cases(path: Path) -> tuple[dict, str]:
    """(the checked case set in a file, the SHA-256 of the bytes parsed), or one CaseError (a LabError) naming file,
    user, question or event and field."""
    data, sha256 = read_json_file(Path(path), 'memory case set')
    return check_memory_cases(str(path), data), sha256


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Write the memory lab's case set (docs/memory.md).")
    parser.add_argument('--output', type=Path, default=MEMORY_CASES, metavar='FILE',
                        help='case set to write, replaced whole (default: memory-cases.json beside this script)')
    args = parser.parse_args(argv)
    check_outputs([('--output', args.output)], [])
    cases = check_memory_cases('memory_cases.py', memory_cases())  # never write a set the loader would refuse
    write_output(args.output, to_json(cases), 'memory case set')
    return 0


if __name__ == '__main__':
    run(main, 'nothing was written', packages=False)
