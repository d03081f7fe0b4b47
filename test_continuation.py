"""Tests for continuation.py and its cases: status grading, keys checked against their history on load, fabricated
identifiers, the four generations and the report, with a pure fake model (no socket).

    .venv/bin/python -m unittest -v test_continuation
"""
import copy
import json
from pathlib import Path
import tempfile
import unittest

from common import LabError
import continuation
from continuation import KEYS, early_losses, fabricated, generations, history_text, load_keys, report, status_of
from case_set import load_cases
from shapes import message_text
from summaries import CallFailed, compact
from summary_record import record, recording
from test_support_continuation import CONTINUATION_CASES as CASES
from test_support_fixtures import HERE
from tokenizer import counter

SHIPPED = json.loads(KEYS.read_text())
KEY = {'kind': 'rejected', 'subject': 'Redis', 'kept': [r'redis[^.]*reject'], 'reversed': [r'chose redis']}


def first_lines(messages, options):
    """A fake model: the first 200 characters of the text it is asked to summarise."""
    text = messages[-1]['content'].split('<session>\n', 1)[1]
    return {'text': text[:200], 'prompt_tokens': 1, 'completion_tokens': 1, 'elapsed_ms': 1}


def keys_file(keys: dict) -> Path:
    folder = tempfile.mkdtemp()
    (path := Path(folder) / 'keys.json').write_text(json.dumps(keys))
    return path


class Statuses(unittest.TestCase):
    def test_a_kept_pattern_alone_is_kept_none_is_dropped_and_a_reversed_one_wins(self):
        self.assertEqual(status_of('Redis is rejected.', KEY), 'kept')
        self.assertEqual(status_of('We cache in memory.', KEY), 'dropped')
        self.assertEqual(status_of('Redis is rejected. Later we chose Redis.', KEY), 'reversed')

    def test_case_is_ignored_as_a_summary_may_capitalise(self):
        self.assertEqual(status_of('REDIS WAS REJECTED', KEY), 'kept')


class Keys(unittest.TestCase):
    def test_the_shipped_keys_load_with_every_kind_and_twelve_cases_six_a_split(self):
        keys = load_keys(KEYS, CASES)
        self.assertEqual(sorted(entry['kind'] for entries in keys.values() for entry in entries['statuses'])[0],
                         'open')
        self.assertEqual({entry['kind'] for entries in keys.values() for entry in entries['statuses']},
                         set(continuation.KINDS))
        self.assertEqual([case['split'] for case in CASES].count('dev'), 6)
        self.assertEqual(len(CASES), 12)

    def test_a_key_that_reads_its_own_history_as_reversed_is_refused(self):
        keys = copy.deepcopy(SHIPPED)
        keys['dev-cont-cache']['statuses'][0]['reversed'] = [r'use redis']  # the history asks 'Should we use Redis?'
        with self.assertRaisesRegex(LabError, r"case dev-cont-cache: statuses\[0\]: the history itself reads as "
                                              r"reversed for 'Redis'; a key must read its own source as kept$"):
            load_keys(keys_file(keys), CASES)

    def test_a_key_whose_history_does_not_state_it_is_refused_as_dropped(self):
        keys = copy.deepcopy(SHIPPED)
        keys['dev-cont-cache']['statuses'][0]['kept'] = [r'memcached is rejected']
        with self.assertRaisesRegex(LabError, 'reads as dropped'):
            load_keys(keys_file(keys), CASES)

    def test_an_unknown_kind_a_bad_pattern_and_segments_short_of_the_history_are_refused(self):
        for change, message in ((lambda k: k['statuses'][0].update(kind='maybe'), 'field kind must be one of'),
                                (lambda k: k['statuses'][0].update(kept=['(']), 'no regular expression'),
                                (lambda k: k.update(segments=[1, 2, 3, 4, 4]), 'rising turn counts'),
                                (lambda k: k.update(segments=[1, 2, 3, 4]), 'rising turn counts')):
            keys = copy.deepcopy(SHIPPED)
            change(keys['held-cont-paths'])
            with self.assertRaisesRegex(LabError, f'case held-cont-paths: .*{message}'):
                load_keys(keys_file(keys), CASES)

    def test_a_cases_entry_that_is_a_number_is_one_line_not_a_type_error(self):
        keys = copy.deepcopy(SHIPPED)
        keys['held-cont-paths'] = 5  # list(5) raised TypeError
        with self.assertRaisesRegex(LabError, r"case held-cont-paths: must be an object with exactly the fields "
                                              r"\['segments', 'statuses'\], got 5$"):
            load_keys(keys_file(keys), CASES)

    def test_the_cases_are_agent_sessions_with_calls_and_long_tool_output(self):
        for case in CASES:
            messages = [message for turn in case['history'] for message in turn]
            self.assertTrue(any(message.get('tool_calls') for message in messages), case['id'])
            self.assertGreaterEqual(max(m['content'].count('\n') for m in messages if m['role'] == 'tool'), 14)


class Fabricated(unittest.TestCase):
    def test_each_identifier_shape_absent_from_the_source_is_counted_once(self):
        summary = ('Edit src/app.py and db.sql; see CHG-77 and APPROVAL-318; run with --legacy-peer-deps; '
                   'job 7731 twice 7731; call pool_size and lru_cache; 42 is too short; plain words are not.')
        self.assertEqual(fabricated(summary, 'APPROVAL-318 lru_cache'),
                         ['src/app.py', 'db.sql', 'CHG-77', '--legacy-peer-deps', '7731', 'pool_size'])

    def test_an_identifier_copied_from_the_source_is_not_fabricated(self):
        case = CASES[0]
        self.assertEqual(fabricated(history_text(case), history_text(case)), [])


class Generations(unittest.TestCase):
    def test_four_generations_each_summarising_the_previous_summary_with_the_turns_removed_since(self):
        sent = []
        def noting(messages, options):
            sent.append(messages[-1]['content'])
            return first_lines(messages, options)
        ends = SHIPPED['dev-cont-cache']['segments']
        made = generations(CASES[0], ends, counter(), noting)
        self.assertEqual([told['outcome'] for _, told in made], ['summarised'] * 4)
        firsts = [sum(told['calls'] for _, told in made[:number]) for number in range(4)]  # each one's first call
        self.assertEqual(['[earlier summary]' in sent[first] for first in firsts], [False, True, True, True])
        self.assertEqual(len(sent), firsts[-1] + made[-1][1]['calls'])
        self.assertTrue(all(chosen['input_tokens'] <= 912 for chosen, _ in made))

    def test_every_summary_source_stays_under_2000_tokens(self):
        for case in CASES:
            made = generations(case, SHIPPED[case['id']]['segments'], counter(), first_lines)
            self.assertLess(max(told['source_tokens'] for _, told in made), 2000, case['id'])
        for case in load_cases(HERE / 'agent-cases.json'):  # the agent cases' one summary each
            self.assertLess(compact(case, counter(), first_lines)[1]['source_tokens'], 2000, case['id'])

    def test_a_case_losing_every_early_fact_at_once_is_named_with_its_generation(self):
        case = {'required': ['A-1', 'B-2'], 'history': [{'user': 'A-1', 'assistant': 'B-2'}]}
        self.assertEqual(early_losses(case, [1], [{}, {}], ['A-1 B-2', 'A-1 B-2', 'nothing']), [2])
        self.assertEqual(early_losses(case, [1], [{}, {}], ['A-1 B-2', 'A-1', 'nothing']), [])

    def test_the_report_replays_the_same_table_twice_from_one_recording(self):
        recorded = {'model': {}, 'calls': {}}
        keys = load_keys(KEYS, CASES)
        record(CASES, counter(), first_lines, recorded, lambda value: None,
               lambda case, call: generations(case, keys[case['id']]['segments'], counter(), call))
        first = report(CASES, keys, counter(), recorded['calls'], 'c.json')
        self.assertEqual(first, report(CASES, keys, counter(), recorded['calls'], 'c.json'))
        self.assertEqual(first.splitlines()[0].split(' | ')[1:3], ['Identifiers kept', 'Statuses kept'])
        self.assertEqual(len(first.splitlines()), 2 + 4 + 2)  # a blank line ends the table in Markdown

    def test_no_growth_is_given_on_a_first_generation_that_summarised_nothing(self):
        # Divided by 1 instead, generation 2's growth was its summary tokens summed over the cases (a ratio of 1,000s)
        def failing(messages, options):
            raise CallFailed('refused')
        recorded, keys = {'model': {}, 'calls': {}}, load_keys(KEYS, CASES)

        def runs(case, call):  # generation 1's calls fail, the later ones are answered
            ends = keys[case['id']]['segments']
            first = {**case, 'history': case['history'][:ends[1]]}
            compact(first, counter(), recording(failing, recorded['calls']))
            generations(case, ends, counter(), call)
        record(CASES, counter(), first_lines, recorded, lambda value: None, runs)
        rows = [line.split(' | ') for line in report(CASES, keys, counter(), recorded['calls'], 'c').splitlines()]
        self.assertEqual([row[6:8] for row in rows[2:4]], [['0.0', '-'], [rows[3][6], '-']])
        self.assertNotEqual(rows[3][6], '0.0')  # generation 2 summarised

    def test_a_generations_grade_reads_the_request_it_would_send(self):
        chosen, told = generations(CASES[0], SHIPPED['dev-cont-cache']['segments'], counter(), first_lines)[0]
        row = continuation.graded(CASES[0], SHIPPED['dev-cont-cache'], chosen, told)
        text = '\n'.join(message_text(m) or '' for m in chosen['messages'])
        self.assertEqual(row['found'], sum(fact in text for fact in CASES[0]['required']))
        self.assertEqual(row['kept'] + row['dropped'] + row['reversed'], 2)

    def test_a_generation_finds_an_identifier_its_summary_quotes_escaped_as_the_rules_table_does(self):
        case = {**CASES[0], 'required': ['x < y & z']}  # the summary block escapes it to x &lt; y &amp; z

        def quoting(messages, options):
            return {'text': 'Keep x < y & z.', 'prompt_tokens': 1, 'completion_tokens': 1, 'elapsed_ms': 1}
        chosen, told = generations(case, SHIPPED['dev-cont-cache']['segments'], counter(), quoting)[0]
        self.assertEqual((told['outcome'], chosen['summary']), ('summarised', 'Keep x < y & z.'))
        self.assertEqual(continuation.graded(case, SHIPPED['dev-cont-cache'], chosen, told)['found'], 1)


if __name__ == '__main__':
    unittest.main()
