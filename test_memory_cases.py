"""Tests of memory_cases.py: the committed memory-cases.json is what the generator writes, holds what issue 31 asks
for, and every mistake a loader must refuse gets its own one-line message."""
import ast
import copy
import json
from pathlib import Path
import tempfile
import unittest

from common import LabError
import memory_cases
from memory_cases import load_memory_cases
from test_support_fixtures import HERE
from test_support_runs import in_process

SHIPPED = HERE / 'memory-cases.json'


def shipped() -> dict:
    return json.loads(SHIPPED.read_text(encoding='utf-8'))


class GeneratorTest(unittest.TestCase):
    def test_a_fresh_run_writes_the_committed_bytes(self):
        with tempfile.TemporaryDirectory() as folder:
            output = Path(folder) / 'memory-cases.json'
            ran = in_process(memory_cases, '--output', str(output))
            self.assertEqual((ran.returncode, ran.stdout, ran.stderr), (0, '', ''))
            self.assertEqual(output.read_bytes(), SHIPPED.read_bytes())

    def test_the_committed_set_loads_and_holds_what_the_issue_asks_for(self):
        cases = load_memory_cases(SHIPPED)[0]
        self.assertEqual(list(cases), ['instructions', 'users', 'questions', 'replay'])
        self.assertEqual(list(cases['users']), ['ana', 'bob', 'cleo'])
        questions = cases['questions']
        self.assertEqual(len(questions), 10)
        self.assertEqual({question['split'] for question in questions}, {'dev', 'held_out'})
        for name in ('stale', 'forgotten'):  # each label is exercised, in at least two questions
            self.assertGreaterEqual(sum(bool(question[name]) for question in questions), 2, name)
        replay = cases['replay']
        actions = [event['action'] for event in replay['events']]
        self.assertEqual((replay['user'], replay['turns'], len(actions)), ('dan', 200, 60))
        self.assertEqual([actions.count(action) for action in ('remember', 'replace', 'forget')], [24, 24, 12])

    def test_no_fact_grants_bob_desk_approval_so_the_question_requires_only_stated_facts(self):
        # The seed's key expected Priya because she is Bob's manager; nothing stored says she approves desks.
        cases = load_memory_cases(SHIPPED)[0]
        question = next(question for question in cases['questions'] if question['id'] == 'bob-desk-approval')
        self.assertFalse([event for event in cases['users']['bob'] if 'approv' in event['fact'].lower()])
        self.assertEqual(question['required'], ["Bob's desk is 3-114, by the north window",
                                                "Bob's manager is Priya Shah"])

    def test_an_output_that_is_a_lab_file_or_in_a_missing_folder_exits_2_in_one_line(self):
        before = (HERE / 'memory_cases.py').read_bytes()
        ran = in_process(memory_cases, '--output', str(HERE / 'memory_cases.py'))
        self.assertEqual((ran.returncode, ran.stdout), (2, ''))
        script = HERE / 'memory_cases.py'
        self.assertEqual(ran.stderr, f"memory_cases.py: --output {script}: the same file as the lab's memory_cases.py "
                                     f'{script}, which this run reads; write the output elsewhere\n')
        self.assertEqual((HERE / 'memory_cases.py').read_bytes(), before)
        missing = Path(tempfile.gettempdir()) / 'no-such-folder-of-the-lab' / 'memory-cases.json'
        ran = in_process(memory_cases, '--output', str(missing))
        self.assertEqual((ran.returncode, ran.stderr), (2, f'memory_cases.py: {missing}: cannot write the memory '
                                                           'case set: No such file or directory\n'))

    def test_no_top_level_name_is_one_another_product_module_defines(self):
        def defined(path: Path) -> set[str]:
            names = set()
            for node in ast.parse(path.read_text(encoding='utf-8')).body:
                targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, 'target', node)]
                for target in targets:  # a, b = ... defines both
                    names |= {getattr(one, 'name', getattr(one, 'id', None))
                              for one in getattr(target, 'elts', [target])}
            return names - {None, 'main', 'parse_args'}

        mine = defined(HERE / 'memory_cases.py')
        self.assertIn('ANA_PHONE', mine)  # a name of a tuple assignment is seen
        for path in sorted(HERE.glob('*.py')):
            if not path.name.startswith('test_') and path.name != 'memory_cases.py':
                with self.subTest(path.name):
                    self.assertEqual(mine & defined(path), set())


def changed(change) -> dict:
    """The shipped set with one change applied to a copy of it."""
    data = copy.deepcopy(shipped())
    change(data)
    return data


def ana(index: int, **fields):
    return lambda data: data['users']['ana'][index].update(fields)


def question(index: int, **fields):
    return lambda data: data['questions'][index].update(fields)


def replay(**fields):
    return lambda data: data['replay'].update(fields)


def add_event(**event):
    return lambda data: data['users']['ana'].append(event)


def timed_replay(data: dict) -> None:
    first = data['replay']['events'][0]
    first['time'] = first.pop('turn')


def holder_required(data: dict) -> None:
    """Ana also tells a fact holding her phone number's text before she asks to forget the number; a question
    then requires it."""
    data['users']['ana'].insert(5, {'time': 6, 'action': 'remember', 'fact': HOLDER})
    data['questions'][2]['required'].append(HOLDER)


TOP = "['instructions', 'users', 'questions', 'replay']"
MOST = 2**63 - 1  # SQLite's largest integer, in which a store keeps an event's time
QUESTION = ("['id', 'user', 'time', 'split', 'kind', 'question', 'required', 'stale', 'forgotten', 'facts_quota', "
            "'budget']")
PHONE, PORTO, LISBON = "Ana's phone number is 555-0142", "Ana's home city is Porto", "Ana's home city is Lisbon"
EMAIL = "Ana's work email is ana.souza@example.com"
HOLDER = f'{PHONE}, after six only'
MARKERS = "['<|channel>', '<channel|>']"
# (what is wrong, the file's text or a change to the shipped set, the message after '{path}: ')
REFUSALS = [
    ('invalid JSON', '{"users": ', 'invalid JSON at line 1 column 11: Expecting value'),
    ('a key twice', '{"users": 1, "users": 2}',
     "key 'users' appears twice in one object; a memory case set names each key once"),
    ('top level a list', '[]', f'must be an object with exactly the fields {TOP} (replay optional), got []'),
    ('no users', lambda data: data.pop('users'),
     f"must be an object with exactly the fields {TOP} (replay optional); missing ['users'], unexpected []"),
    ('empty instructions', lambda data: data.update(instructions=' '),
     'field instructions must be a non-empty string, got " "'),
    ('thinking channel in the instructions', lambda data: data.update(instructions='<|channel>Answer.'),
     f'field instructions contains a thinking-channel marker {MARKERS}, which the counter does not cover'),
    ('no users', lambda data: data.update(users={}),
     'field users must be a non-empty object of user names and their events, got {}'),
    ('a user without events', lambda data: data['users'].update(ana=[]),
     'user ana: the events must be a non-empty list of events'),
    ('an event not an object', lambda data: data['users']['ana'].insert(0, 42),
     "user ana: event 0: must be an object with exactly the fields ['time', 'action', 'fact'], got 42"),
    ('an unknown action', ana(0, action='update'),
     "user ana: event 0: field action must be one of ['remember', 'replace', 'forget'], got \"update\""),
    ('a replace without the fact it replaces', lambda data: data['users']['ana'][5].pop('replaces'),
     "user ana: event 5: must be an object with exactly the fields ['time', 'action', 'fact', "
     "'replaces']; missing ['replaces'], unexpected []"),
    ('a remember that replaces', ana(0, replaces=PORTO),
     "user ana: event 0: must be an object with exactly the fields ['time', 'action', 'fact']; "
     "missing [], unexpected ['replaces']"),
    ('a time as text', ana(1, time='2'),
     f'user ana: event 1: field time must be a positive integer of at most {MOST}, got "2"'),
    ('a time that is a boolean', ana(0, time=True),
     f'user ana: event 0: field time must be a positive integer of at most {MOST}, got true'),
    ('a time past SQLite\'s integers', add_event(time=2**63, action='remember', fact='Ana is tall'),
     f'user ana: event 10: field time must be a positive integer of at most {MOST}, got {2**63}'),
    ('a time of 4000 digits', ana(0, time=10**3999),
     f'user ana: event 0: field time must be a positive integer of at most {MOST}, got 1{"0" * 36}...'),
    ('a time not after the previous', ana(1, time=1), "user ana: event 1: field time is 1, not after the previous "
     "event's 1"),
    ('an empty fact', ana(0, fact=''), 'user ana: event 0: field fact must be a non-empty string, got ""'),
    ('a fact of two lines', ana(0, fact='Ana is tall\n- Ana is 40'),
     'user ana: event 0: field fact holds a line break; a fact is one line of the memory block'),
    ('a lone surrogate in a fact', ana(0, fact='Ana \ud800'),
     'user ana: event 0: field fact holds a lone surrogate, which is not text'),
    ('thinking channel in a fact', ana(0, fact='Ana <channel|>'),
     f'user ana: event 0: field fact contains a thinking-channel marker {MARKERS}, which the counter does not cover'),
    ('a remember of a current fact', ana(2, fact=PORTO),
     f'user ana: event 2: field fact: fact "{PORTO}" is already current at time 3'),
    ('a replace by a current fact', ana(5, fact=EMAIL),
     f'user ana: event 5: field fact: fact "{EMAIL}" is already current at time 8'),
    ('a replace of a fact never remembered', ana(5, replaces="Ana's home city is Faro"),
     'user ana: event 5: field replaces: fact "Ana\'s home city is Faro" is never remembered at time 8; only a '
     'current fact can be replaced'),
    ('a replace of a replaced fact',
     add_event(time=16, action='replace', fact="Ana's home city is Faro", replaces=PORTO),
     f'user ana: event 10: field replaces: fact "{PORTO}" is replaced at time 16; only a current fact can be replaced'),
    ('a forget of a forgotten fact', add_event(time=16, action='forget', fact=PHONE),
     f'user ana: event 10: field fact: fact "{PHONE}" is forgotten at time 16; only a current fact can be forgotten'),
    ('a forget of a fact never remembered', add_event(time=16, action='forget', fact='Ana is tall'),
     "user ana: event 10: field fact: fact 'Ana is tall' is never remembered at time 16; only a current fact can be "
     'forgotten'),
    ('no questions', lambda data: data.update(questions=[]),
     'field questions must be a non-empty list of questions, got []'),
    ('a question not an object', lambda data: data['questions'].insert(0, 'Where?'),
     f'question at index 0: must be an object with exactly the fields {QUESTION}, got "Where?"'),
    ('a question without forgotten', lambda data: data['questions'][0].pop('forgotten'),
     f"question ana-city: must be an object with exactly the fields {QUESTION}; missing ['forgotten'], "
     'unexpected []'),
    ('a question with an answer', question(0, answer='Lisbon'),
     f"question ana-city: must be an object with exactly the fields {QUESTION}; missing [], "
     "unexpected ['answer']"),
    ('an id not a string', question(0, id=7), 'question at index 0: field id must be a non-empty string, got 7'),
    ('a duplicate id', question(1, id='ana-city'),
     'question ana-city: field id is a duplicate; every question id must be unique'),
    ('an unknown split', question(0, split='test'),
     'question ana-city: field split must be one of [\'dev\', \'held_out\'], got "test"'),
    ('the replay user asked', question(0, user='dan'),
     'question ana-city: field user must be one of [\'ana\', \'bob\', \'cleo\'], got "dan"'),
    ('a lone surrogate in a question', question(0, question='Where\ud800?'),
     'question ana-city: field question holds a lone surrogate, which is not text'),
    ('a time of zero', question(0, time=0),
     f'question ana-city: field time must be a positive integer of at most {MOST}, got 0'),
    ('a time past every event', question(0, time=2**63),
     f'question ana-city: field time must be a positive integer of at most {MOST}, got {2**63}'),
    ('a facts quota of zero', question(0, facts_quota=0),
     'question ana-city: field facts_quota must be a positive integer, got 0'),
    ('a facts quota that is a boolean', question(0, facts_quota=True),
     'question ana-city: field facts_quota must be a positive integer, got true'),
    ('a budget without margin', lambda data: data['questions'][0]['budget'].pop('margin'),
     "question ana-city: field budget must be an object with exactly the fields ['context_limit', 'max_new_tokens', "
     "'margin']; missing ['margin'], unexpected []"),
    ('a budget with no allowance', lambda data: data['questions'][0]['budget'].update(max_new_tokens=480),
     'question ana-city: field budget leaves no input allowance (context_limit - max_new_tokens - margin must be '
     'positive)'),
    ('required not a list', question(0, required=LISBON),
     f'question ana-city: field required must be a list of distinct facts (strings), got "{LISBON}"'),
    ('a required fact twice', question(0, required=[LISBON, LISBON]),
     f'question ana-city: field required must be a list of distinct facts (strings), got ["{LISBON}", "Ana\'s ...'),
    ('no required fact', question(0, required=[]),
     'question ana-city: field required is empty; a question needs at least one required fact'),
    ('a required fact no event states', question(0, required=['Ana lives on the moon']),
     "question ana-city: field required: fact 'Ana lives on the moon' is stated by no event of user ana"),
    ("another user's fact", question(0, required=["Bob's manager is Priya Shah"]),
     'question ana-city: field required: fact "Bob\'s manager is Priya Shah" is stated by no event of user ana'),
    ('asked before its required fact exists', question(0, time=7),
     f'question ana-city: field required: fact "{LISBON}" is not yet stated at time 7; a required fact must be '
     'current then'),
    ('a required fact also stale', question(0, required=[LISBON, PORTO]),
     f'question ana-city: field required: fact "{PORTO}" is replaced at time 15; a required fact must be current then'),
    ('asked before its stale fact is replaced', question(0, time=7, required=[EMAIL]),
     f'question ana-city: field stale: fact "{PORTO}" is current at time 7; a stale fact must be replaced then'),
    ('asked before its forgotten fact is forgotten', question(2, time=10),
     f'question ana-contact: field forgotten: fact "{PHONE}" is current at time 10; a forgotten fact must be '
     'forgotten then'),
    ('a forgotten fact labelled stale', question(2, stale=[PHONE], forgotten=[]),
     f'question ana-contact: field stale: fact "{PHONE}" is forgotten at time 15; a stale fact must be replaced then'),
    ('a replay without turns', lambda data: data['replay'].pop('turns'),
     "replay: must be an object with exactly the fields ['user', 'turns', 'events']; missing ['turns'], "
     'unexpected []'),
    ('a replay of no turns', replay(turns=0),
     'replay: field turns must be a positive integer of at most 1000, got 0'),
    ('a replay of 30 million turns', replay(turns=30_000_000),
     'replay: field turns must be a positive integer of at most 1000, got 30000000'),
    ('a replay turn past SQLite\'s integers', lambda data: data['replay']['events'][-1].update(turn=2**63),
     f'replay: event 59: field turn must be a positive integer of at most {MOST}, got {2**63}'),
    ('a required fact that went with a forgotten fact it holds', holder_required,  # as the managed store forgets
     f'question ana-contact: field required: fact "{HOLDER}" is forgotten at time 15; a required fact must be current '
     'then'),
    ('an event past the last turn', replay(turns=150),
     "replay: event 59: field turn is 197, past the replay's 150 turns"),
    ('a replay event timed, not turned', timed_replay,
     "replay: event 0: must be an object with exactly the fields ['turn', 'action', 'fact']; "
     "missing ['turn'], unexpected ['time']"),
    ('a replay turn not after the previous', lambda data: data['replay']['events'][1].update(turn=1),
     "replay: event 1: field turn is 1, not after the previous event's 1"),
    ('a replay forget of a replaced fact',
     lambda data: data['replay']['events'][2].update(fact='Dan is tracking ticket OPS-101, opened'),
     "replay: event 2: field fact: fact 'Dan is tracking ticket OPS-101, opened' is replaced at turn 7; only a "
     'current fact can be forgotten'),
]


class RefusalTest(unittest.TestCase):
    def test_every_mistake_is_refused_with_its_own_one_line_message(self):
        for name, data, message in REFUSALS:
            with self.subTest(name), tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / 'memory-cases.json'
                path.write_text(data if isinstance(data, str) else json.dumps(changed(data)), encoding='utf-8')
                with self.assertRaises(LabError) as caught:  # a CaseError, or read_json_file's for what is not JSON
                    load_memory_cases(path)
                self.assertEqual(str(caught.exception), f'{path}: {message}')

    def test_a_set_of_ones_own_users_without_a_replay_loads(self):
        data = changed(lambda data: data.pop('replay'))
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'mine.json'
            path.write_text(json.dumps(data), encoding='utf-8')
            self.assertEqual(list(load_memory_cases(path)[0]), ['instructions', 'users', 'questions'])

    def test_a_question_sees_the_events_of_its_own_time(self):
        # ana's home city is replaced at time 8: a question at 8 finds Lisbon current and Porto replaced.
        data = changed(question(0, time=8))
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'memory-cases.json'
            path.write_text(json.dumps(data), encoding='utf-8')
            self.assertEqual(load_memory_cases(path)[0]['questions'][0]['time'], 8)


if __name__ == '__main__':
    unittest.main()
