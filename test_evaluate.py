"""Tests for the rules, the case set, the grader, evaluate.py's command line and the recorded report.

    .venv/bin/python -m unittest -v test_evaluate.py   (about 20 s)

Each test is named after the failure it pins. The figures are exact: selection
and counting are deterministic. The oracles are the original report's rows and
table written out here and figures worked out by hand; every request's count
against the official chat template is test_tokenizer.py's. Files are only ever
written into temporary directories.
"""
import copy
import hashlib
import json
import os
from pathlib import Path
import re
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

from case_set import CaseError, load_cases
from common import LabError
from lab_files import to_json
from scorer import graded_row
from shapes import allowance
import evaluate
from evaluate import report
from prepared_folder import PREPARED_ENV
import strategies
from strategies import CUES, RULES, notes, recent, relevant
from test_support_fixtures import HERE, RECORDED, shipped_cases, with_recorded_environment
from test_support_runs import evaluate_py, in_process, lab_main
from tokenizer import counter
from views import compare


# Every (strategy, case) row of the original report: kept turns, notes, facts found, missing, stale included.
ORIGINAL_ROWS = [
    ('recent', 'dev-latest', [1], 0, 1, [], []),
    ('recent', 'dev-old-decision', [2], 0, 0, ['We chose PostgreSQL for the application.'], []),
    ('recent', 'dev-correction', [], 0, 0, ['Switch to PostgreSQL instead of MySQL.'], []),
    ('recent', 'dev-pronoun', [], 0, 0, ['exports run hourly'], []),
    ('recent', 'dev-spread', [2, 3], 0, 1, ['400 days of history'], []),
    ('recent', 'dev-no-overlap', [], 0, 0, ['blue-green rollout'], []),
    ('recent', 'held-latest', [1], 0, 1, [], []),
    ('recent', 'held-old-decision', [2], 0, 0, ['decided to store uploads in object storage'], []),
    ('recent', 'held-correction', [], 0, 0, ['use Redis streams for the job queue'], []),
    ('recent', 'held-pronoun', [], 0, 0, ['invoice retry limit to three attempts'], []),
    ('recent', 'held-spread', [2, 3], 0, 1, ['at least 14 characters'], []),
    ('recent', 'held-buried', [1], 0, 0, ['gateway must allow 200 connections'], []),
    ('relevant', 'dev-latest', [1], 0, 1, [], []),
    ('relevant', 'dev-old-decision', [0], 0, 1, [], []),
    ('relevant', 'dev-correction', [0], 0, 0, ['Switch to PostgreSQL instead of MySQL.'], ['We will use MySQL']),
    ('relevant', 'dev-pronoun', [1], 0, 1, [], []),
    ('relevant', 'dev-spread', [0, 2], 0, 2, [], []),
    ('relevant', 'dev-no-overlap', [], 0, 0, ['blue-green rollout'], []),
    ('relevant', 'held-latest', [1], 0, 1, [], []),
    ('relevant', 'held-old-decision', [0], 0, 1, [], []),
    ('relevant', 'held-correction', [0, 1], 0, 1, [], ['decided to use RabbitMQ']),
    ('relevant', 'held-pronoun', [1], 0, 1, [], []),
    ('relevant', 'held-spread', [], 0, 0, ['at least 14 characters', 'expire after 30 minutes'], []),
    ('relevant', 'held-buried', [], 0, 0, ['gateway must allow 200 connections'], []),
    ('notes', 'dev-latest', [1], 0, 1, [], []),
    ('notes', 'dev-old-decision', [2], 1, 1, [], []),
    ('notes', 'dev-correction', [], 3, 1, [], ['We will use MySQL']),
    ('notes', 'dev-pronoun', [], 1, 1, [], []),
    ('notes', 'dev-spread', [2, 3], 1, 2, [], []),
    ('notes', 'dev-no-overlap', [], 0, 0, ['blue-green rollout'], []),
    ('notes', 'held-latest', [1], 0, 1, [], []),
    ('notes', 'held-old-decision', [2], 1, 1, [], []),
    ('notes', 'held-correction', [], 1, 0, ['use Redis streams for the job queue'], ['decided to use RabbitMQ']),
    ('notes', 'held-pronoun', [], 1, 1, [], []),
    ('notes', 'held-spread', [2, 3], 1, 2, [], []),
    ('notes', 'held-buried', [1], 2, 1, [], []),
    ('hybrid', 'dev-latest', [1], 0, 1, [], []),
    ('hybrid', 'dev-old-decision', [0, 2], 0, 1, [], []),
    ('hybrid', 'dev-correction', [0], 0, 0, ['Switch to PostgreSQL instead of MySQL.'], ['We will use MySQL']),
    ('hybrid', 'dev-pronoun', [1], 0, 1, [], []),
    ('hybrid', 'dev-spread', [0, 2, 3], 0, 2, [], []),
    ('hybrid', 'dev-no-overlap', [], 0, 0, ['blue-green rollout'], []),
    ('hybrid', 'held-latest', [1], 0, 1, [], []),
    ('hybrid', 'held-old-decision', [0, 2], 0, 1, [], []),
    ('hybrid', 'held-correction', [0, 1], 0, 1, [], ['decided to use RabbitMQ']),
    ('hybrid', 'held-pronoun', [1], 0, 1, [], []),
    ('hybrid', 'held-spread', [3], 0, 0, ['at least 14 characters', 'expire after 30 minutes'], []),
    ('hybrid', 'held-buried', [1], 0, 0, ['gateway must allow 200 connections'], []),
]

# The original summary table: facts found, complete cases, cases with stale facts (each of 7 facts and 6 cases).
ORIGINAL_SUMMARY = {
    ('recent', 'dev'): (2, 1, 0), ('recent', 'held_out'): (2, 1, 0),
    ('relevant', 'dev'): (5, 4, 1), ('relevant', 'held_out'): (4, 4, 1),
    ('notes', 'dev'): (6, 5, 1), ('notes', 'held_out'): (6, 5, 1),
    ('hybrid', 'dev'): (5, 4, 1), ('hybrid', 'held_out'): (4, 4, 1),
}


class ProvenanceTest(unittest.TestCase):
    def test_the_case_set_hash_is_of_the_bytes_graded_even_if_the_file_changes_during_the_run(self):
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'cases.json'
            original = (HERE / 'cases.json').read_bytes()
            path.write_bytes(original)
            real = evaluate.run_rules

            def edit_then_run(*args, **kwargs):  # the file changes after it was read, before the report is made
                path.write_text('[]', encoding='utf-8')
                return real(*args, **kwargs)

            with mock.patch.object(evaluate, 'run_rules', edit_then_run):
                report = evaluate.report(path)
        self.assertEqual(report['case_set_sha256'], hashlib.sha256(original).hexdigest())


class RecordedReportTest(unittest.TestCase):
    def test_fresh_run_equals_the_recording_apart_from_the_environment(self):
        result = evaluate_py()
        self.assertEqual(result.returncode, 0, result.stderr)
        fresh = json.loads(result.stdout)
        recorded_text = RECORDED.read_text(encoding='utf-8')
        recorded = json.loads(recorded_text)
        fresh = with_recorded_environment(fresh, recorded)
        changes = compare(recorded, fresh)
        if changes:
            self.fail('the fresh run differs from evaluation-result.json:\n' + '\n'.join(changes))
        self.assertEqual(to_json(fresh), recorded_text, 'same content, but the recorded bytes differ')

    def test_readme_distances_to_the_best_possible_follow_from_the_recording(self):
        # The figures "Reading the failures" gives, read back from the recording.
        recorded = json.loads(RECORDED.read_text(encoding='utf-8'))
        best = {row['case']: row for row in recorded['best_possible']['cases']}
        found = {name: {row['case']: row['required_found'] for row in rows} for name, rows in recorded['cases'].items()}
        gaps = {name: tuple(recorded['best_possible']['summary'][split]['facts_found'] - figures[split]['facts_found']
                            for split in ('dev', 'held_out')) for name, figures in recorded['summary'].items()}
        self.assertEqual(gaps, {'recent': (5, 4), 'relevant': (2, 2), 'notes': (1, 0), 'hybrid': (2, 2)})
        self.assertEqual({case_id: (best[case_id]['turns'], best[case_id]['input_tokens'])
                          for case_id in ('dev-old-decision', 'held-spread', 'held-correction', 'dev-no-overlap')},
                         {'dev-old-decision': ([0], 60), 'held-spread': ([0, 2], 84), 'held-correction': ([1], 65),
                          'dev-no-overlap': ([0], 61)})
        self.assertEqual([found[name]['dev-no-overlap'] for name in RULES], [0, 0, 0, 0])
        self.assertEqual((best['held-buried']['required_found'], found['notes']['held-buried']), (0, 1))

    def test_recording_holds_a_best_possible_row_per_case_labelled_as_reading_the_labels(self):
        recorded = json.loads(RECORDED.read_text(encoding='utf-8'))
        best = recorded['best_possible']
        self.assertEqual(best['label'], 'best possible (reads the labels)')
        self.assertEqual([row['case'] for row in best['cases']], [row['case'] for row in recorded['cases']['recent']])
        self.assertNotIn('best_possible', RULES)
        self.assertEqual({split: (s['facts_found'], s['facts_total'], s['complete_cases'], s['not_searched'])
                          for split, s in best['summary'].items()},
                         {'dev': (7, 7, 6, 0), 'held_out': (6, 7, 5, 0)})


class OriginalFiguresTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.report = report()

    def test_every_row_reproduces_the_original_report(self):
        rows = {(name, row['case']): row for name, strategy_rows in self.report['cases'].items()
                for row in strategy_rows}
        self.assertEqual(len(rows), len(ORIGINAL_ROWS))
        for name, case_id, turns, note_count, found, missing, stale in ORIGINAL_ROWS:
            with self.subTest(strategy=name, case=case_id):
                row = rows[(name, case_id)]
                self.assertEqual((row['turns'], row['notes'], row['required_found'], row['missing'],
                                  row['stale_included']), (turns, note_count, found, missing, stale))

    def test_summary_matches_the_original_table(self):
        for (name, split), (found, complete, stale) in ORIGINAL_SUMMARY.items():
            with self.subTest(strategy=name, split=split):
                summary = self.report['summary'][name][split]
                self.assertEqual((summary['facts_found'], summary['facts_total'], summary['complete_cases'],
                                  summary['cases'], summary['cases_with_stale_facts'], summary['over_budget']),
                                 (found, 7, complete, 6, stale, 0))

    def test_dev_correction_counts_match_the_original(self):
        tokens = {name: row['input_tokens'] for name, rows in self.report['cases'].items()
                  for row in rows if row['case'] == 'dev-correction'}
        self.assertEqual(tokens, {'recent': 35, 'relevant': 57, 'notes': 110, 'hybrid': 57})

    def test_splits_are_reported_separately(self):
        for name, summary in self.report['summary'].items():
            with self.subTest(strategy=name):
                self.assertEqual((summary['dev']['cases'], summary['held_out']['cases']), (6, 6))

    def test_no_strategy_exceeds_the_allowance_on_any_case(self):
        over = [(name, row['case'], row['input_tokens']) for name, rows in self.report['cases'].items()
                for row in rows if row['input_tokens'] > 256 or not row['within_budget']]
        self.assertEqual(over, [])


class FailurePatternTest(unittest.TestCase):
    def test_recent_stops_at_a_long_turn(self):
        case = shipped_cases()['dev-old-decision']
        # Turn 2 (index 1) is a log larger than the whole allowance on its own, so the walk back ends there.
        log = case['history'][1]
        self.assertGreater(counter()([{'role': 'user', 'content': log['user']},
                                          {'role': 'assistant', 'content': log['assistant']}]), allowance(case))
        row = graded_row(case, recent(case, counter()))
        self.assertEqual((row['turns'], row['required_found'], row['missing']),
                         ([2], 0, ['We chose PostgreSQL for the application.']))

    def test_relevance_misses_a_fact_without_shared_words(self):
        for case_id, missing in (('dev-no-overlap', ['blue-green rollout']),
                                 ('held-spread', ['at least 14 characters', 'expire after 30 minutes'])):
            with self.subTest(case_id):
                case = shipped_cases()[case_id]
                result = graded_row(case, relevant(case, counter()))
                self.assertEqual((result['turns'], result['required_found'], result['missing']), ([], 0, missing))

    def test_relevance_does_not_stem_plurals(self):
        from strategies import words
        self.assertEqual(words('What are the password and session rules?'), {'password', 'session', 'rules'})
        self.assertEqual(words('Passwords must be at least 14 characters.'),
                         {'passwords', 'must', 'least', '14', 'characters'})

    def test_notes_miss_a_correction_without_a_cue_word_and_carry_the_replaced_decision(self):
        case = shipped_cases()['held-correction']
        selected = notes(case, counter())
        # "Actually, use Redis streams ..." has no cue word; only the RabbitMQ decision becomes a note.
        self.assertEqual(selected['notes'], 1)
        self.assertIn('\n- [turn 1, user] We decided to use RabbitMQ for the job queue.\n',
                      selected['messages'][-1]['content'])
        row = graded_row(case, selected)
        self.assertEqual((row['missing'], row['stale_included']),
                         (['use Redis streams for the job queue'], ['decided to use RabbitMQ']))

    def test_grader_lists_stale_facts_separately_from_missing_ones(self):
        # A hand-made selection holding only the replaced decision: one stale fact, the required one missing.
        only_old_turn = {'turns': [0], 'notes': 0, 'input_tokens': 20, 'messages': [
            {'role': 'system', 'content': 'Be brief.'},
            {'role': 'user', 'content': 'We will use MySQL for the first version.'}]}
        row = graded_row(shipped_cases()['dev-correction'], only_old_turn)
        self.assertEqual((row['required_found'], row['missing'], row['stale_included']),
                         (0, ['Switch to PostgreSQL instead of MySQL.'], ['We will use MySQL']))

    def test_escaped_note_still_counts_as_found(self):
        fact = 'We must keep <b>bold</b> & italics in exports.'
        case = shipped_cases()['dev-pronoun']
        case['history'][1]['user'], case['required'] = fact, [fact]
        selected = notes(case, counter())
        self.assertIn('- [turn 2, user] We must keep &lt;b&gt;bold&lt;/b&gt; &amp; italics in exports.',
                      selected['messages'][-1]['content'])
        self.assertNotIn(fact, selected['messages'][-1]['content'])
        self.assertEqual(graded_row(case, selected)['missing'], [])

    def test_held_out_notes_depend_on_the_limit_cue(self):
        without_limit = re.compile(CUES.pattern.replace('|limit', ''), CUES.flags)
        self.assertNotEqual(without_limit.pattern, CUES.pattern)
        held_out = [case for case in shipped_cases().values() if case['split'] == 'held_out']

        def found(cues):
            for cache in (strategies.cue_sentences, strategies.all_note_lines):  # they keep what the cues found
                cache.cache_clear()
            with mock.patch.object(strategies, 'CUES', cues):
                found = {case['id']: graded_row(case, notes(case, counter()))['required_found'] for case in held_out}
            for cache in (strategies.cue_sentences, strategies.all_note_lines):
                cache.cache_clear()
            return found

        with_cue, without_cue = found(CUES), found(without_limit)
        self.assertEqual(sum(with_cue.values()) - sum(without_cue.values()), 1)
        self.assertEqual((with_cue['held-pronoun'], without_cue['held-pronoun']), (1, 0))

    def test_limit_cue_occurs_in_two_held_out_cases_and_no_dev_case(self):
        mentions = sorted(case['id'] for case in shipped_cases().values() if re.search(r'\blimit\b', json.dumps(case), re.I))
        self.assertEqual(mentions, ['held-buried', 'held-pronoun'])

    def test_strategies_leave_the_case_they_are_given_unchanged(self):
        for name, strategy in RULES.items():
            for case_id, case in shipped_cases().items():
                with self.subTest(strategy=name, case=case_id):
                    before = json.dumps(case, sort_keys=True)
                    strategy(case, counter())
                    self.assertEqual(json.dumps(case, sort_keys=True), before)

    def test_strategies_keep_turns_in_conversation_order_and_end_with_the_question(self):
        for name, strategy in RULES.items():
            for case in shipped_cases().values():
                with self.subTest(strategy=name, case=case['id']):
                    selected = strategy(case, counter())
                    messages = selected['messages']
                    expected = [{'role': 'system', 'content': case['instructions']}]
                    for index in selected['turns']:
                        expected += [{'role': 'user', 'content': case['history'][index]['user']},
                                     {'role': 'assistant', 'content': case['history'][index]['assistant']}]
                    self.assertEqual(messages[:-1], expected)
                    self.assertTrue(messages[-1]['content'].endswith(case['current']))

class ReadmeCaseTest(unittest.TestCase):
    def test_the_readme_case_to_copy_loads_and_is_dev_correction_of_cases_json(self):
        blocks = re.findall(r'^```json\n(.*?)^```$', (HERE / 'README.md').read_text(encoding='utf-8'),
                            flags=re.DOTALL | re.MULTILINE)
        self.assertEqual(len(blocks), 1)
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'my-cases.json'
            path.write_text(blocks[0], encoding='utf-8')
            loaded = load_cases(path)  # the lab's own loader: it refuses whatever evaluate.py would refuse
        shipped = {case['id']: case for case in load_cases(HERE / 'cases.json')}
        self.assertEqual(loaded, [shipped['dev-correction']])


class CaseValidationTest(unittest.TestCase):
    def write(self, folder: str, data) -> Path:
        path = Path(folder) / 'cases.json'
        path.write_text(data if isinstance(data, str) else json.dumps(data), encoding='utf-8')
        return path

    def test_every_invalid_case_set_is_rejected_with_its_own_message(self):
        base = json.loads((HERE / 'cases.json').read_text(encoding='utf-8'))
        fields = "['id', 'split', 'kind', 'instructions', 'current', 'history', 'budget', 'required', 'stale']"

        def one(change):
            data = copy.deepcopy(base[:1])
            change(data[0])
            return data

        table_of_cases = [
            ('invalid JSON', '[{"id": ', 'invalid JSON at line 1 column 9: Expecting value'),
            ('top level not a list', '{"id": "x"}', 'the top level must be a list of cases, got dict'),
            ('case not an object', '[42]', 'case 0: expected an object, got int'),
            ('missing field', one(lambda c: c.pop('stale')),
             f"case dev-latest: must be an object with exactly the fields {fields}; missing ['stale'], unexpected []"),
            ('extra field', one(lambda c: c.update(answer='Friday')),
             f"case dev-latest: must be an object with exactly the fields {fields}; missing [], unexpected ['answer']"),
            ('id not a string', one(lambda c: c.update(id=7)),
             'case at index 0: field id must be a non-empty string, got 7'),
            ('question not a string', one(lambda c: c.update(current=['When?'])),
             'case dev-latest: field current must be a non-empty string, got ["When?"]'),
            ('unknown split', one(lambda c: c.update(split='test')),
             'case dev-latest: field split must be one of [\'dev\', \'held_out\'], got "test"'),
            ('history not a list', one(lambda c: c.update(history='hello')),
             'case dev-latest: field history must be a list of {"user", "assistant"} objects, got "hello"'),
            ('turn without assistant', one(lambda c: c['history'][1].pop('assistant')),
             "case dev-latest: field history[1] must be an object with exactly the fields ['user', 'assistant']; "
             "missing ['assistant'], unexpected []"),
            ('turn with a number', one(lambda c: c['history'][0].update(user=3)),
             'case dev-latest: field history[0].user must be a string, got 3'),
            ('budget field missing', one(lambda c: c['budget'].pop('margin')),
             "case dev-latest: field budget must be an object with exactly the fields ['context_limit', "
             "'max_new_tokens', 'margin']; missing ['margin'], unexpected []"),
            ('budget field misspelled', one(lambda c: c['budget'].update(marign=c['budget'].pop('margin'))),
             "case dev-latest: field budget must be an object with exactly the fields ['context_limit', "
             "'max_new_tokens', 'margin']; missing ['margin'], unexpected ['marign']"),
            ('budget not an object', one(lambda c: c.update(budget=[384, 96, 32])),
             "case dev-latest: field budget must be an object with exactly the fields ['context_limit', "
             "'max_new_tokens', 'margin'], got [384, 96, 32]"),
            ('empty history', one(lambda c: c.update(history=[])),
             'case dev-latest: field history is empty; the required facts must be stated in its messages'),
            ('stale fact also required', one(lambda c: c.update(stale=[c['required'][0]])),
             "case dev-latest: field stale: fact 'The release freeze starts on Thursday at noon.' is also required; a "
             'replaced fact cannot be one the question needs'),
            ('negative margin', one(lambda c: c['budget'].update(margin=-1)),
             'case dev-latest: field budget.margin must be a non-negative integer, got -1'),
            ('boolean limit', one(lambda c: c['budget'].update(context_limit=True)),
             'case dev-latest: field budget.context_limit must be a non-negative integer, got true'),
            ('no allowance left', one(lambda c: c['budget'].update(max_new_tokens=352)),
             'case dev-latest: field budget leaves no input allowance '
             '(context_limit - max_new_tokens - margin must be positive)'),
            ('no required fact', one(lambda c: c.update(required=[])),
             'case dev-latest: field required is empty; a case needs at least one required fact'),
            ('fact not a string', one(lambda c: c.update(stale=[3])),
             'case dev-latest: field stale must be a list of non-empty strings, got [3]'),
            ('required fact never stated', one(lambda c: c.update(required=['a fact the history never states'])),
             "case dev-latest: field required: fact 'a fact the history never states' "
             'does not occur in any message of the history'),
            ('stale fact never stated', one(lambda c: c.update(stale=['We chose Oracle'])),
             "case dev-latest: field stale: fact 'We chose Oracle' does not occur in any message of the history"),
            ('duplicate id', copy.deepcopy(base[:1]) * 2,
             'case dev-latest: field id is a duplicate; every case id must be unique'),
            ('empty case set', '[]', 'the case set is empty'),
            ('lone surrogate in the question', one(lambda c: c.update(current='When\ud800?')),
             'case dev-latest: field current holds a lone surrogate, which is not text'),
            ('integer too long to read', '[' + '7' * 5000 + ']',
             'the case set cannot be read as JSON: Exceeds the limit (4300 digits) for integer string '
             'conversion: value has 5000 digits; use sys.set_int_max_str_digits() to increase the limit'),
            ('thinking channel in a model turn',
             one(lambda c: c['history'][1].update(assistant='<|channel>thought\n<channel|>Noted.')),
             "case dev-latest: field history[1].assistant contains a thinking-channel marker "
             "['<|channel>', '<channel|>'], which the counter does not cover"),
        ]
        for name, data, message in table_of_cases:
            with self.subTest(name), tempfile.TemporaryDirectory() as folder:
                path = self.write(folder, data)
                with self.assertRaises(LabError) as caught:
                    load_cases(path)
                self.assertEqual(str(caught.exception), f'{path}: {message}')

    def test_a_case_set_that_is_not_utf8_is_rejected(self):
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'cases.json'
            path.write_bytes(b'\xff\xfe[]')
            with self.assertRaises(LabError) as caught:
                load_cases(path)
        self.assertEqual(str(caught.exception), f'{path}: the case set is not UTF-8 text (byte 0)')

    def test_a_budget_too_small_for_the_bare_request_is_rejected(self):
        data = json.loads((HERE / 'cases.json').read_text(encoding='utf-8'))[:1]
        data[0]['budget'] = {'context_limit': 40, 'max_new_tokens': 4, 'margin': 2}  # the bare request needs 35
        with tempfile.TemporaryDirectory() as folder:
            path = self.write(folder, data)
            with self.assertRaises(LabError) as caught:
                report(path)
        self.assertEqual(str(caught.exception), f'{path}: case dev-latest: field budget allows 34 input tokens, '
                                                'but the instructions and question alone need 35')

    def test_a_fact_split_across_two_messages_is_rejected(self):
        data = json.loads((HERE / 'cases.json').read_text(encoding='utf-8'))[:1]
        data[0]['required'] = ['noon. Thursday']  # the end of one message and the start of the next
        with tempfile.TemporaryDirectory() as folder, self.assertRaises(CaseError):
            load_cases(self.write(folder, data))

    def test_the_shipped_case_set_has_six_cases_per_split(self):
        splits = [case['split'] for case in shipped_cases().values()]
        self.assertEqual((splits.count('dev'), splits.count('held_out'), len(splits)), (6, 6, 12))


class CommandLineTest(unittest.TestCase):
    def run_on_file(self, option: str, text: str) -> tuple[Path, subprocess.CompletedProcess]:
        """Run evaluate.py with `option` naming a temporary file that holds `text`."""
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'input.json'
            path.write_text(text, encoding='utf-8')
            return path, in_process(evaluate, option, str(path))

    def test_case_error_exits_2_with_one_line_and_no_traceback(self):
        path, result = self.run_on_file('--cases', '[]x')
        self.assertEqual(result.returncode, 2)
        self.assertEqual(result.stdout, '')
        self.assertEqual(result.stderr, f'evaluate.py: {path}: invalid JSON at line 1 column 3: Extra data\n')

    def test_help_explains_the_options(self):
        result = in_process(evaluate, '--help')
        self.assertEqual(result.returncode, 0)
        for option in ('--cases', '--format', '--output', '--compare', '--show', '--strategy', '--prompt', '--full'):
            self.assertIn(option, result.stdout)

    def test_the_readme_table_is_what_format_table_prints(self):
        result = in_process(evaluate, '--format', 'table')
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn('\n' + result.stdout + '\n', (HERE / 'README.md').read_text(encoding='utf-8'))
        self.assertEqual(result.stdout.splitlines()[2], '| recent | dev | 2 of 7 | 1 of 6 | 0 | 51.3 |')
        self.assertEqual(result.stdout.splitlines()[-2:], [
            '| best possible (reads the labels) | dev | 7 of 7 | 6 of 6 | 0 | 65 |',
            '| best possible (reads the labels) | held-out | 6 of 7 | 5 of 6 | 0 | 62.8 |'])

    def test_compare_exits_0_when_nothing_changed(self):
        result = in_process(evaluate, '--compare', str(RECORDED))
        self.assertEqual((result.returncode, result.stdout), (0, f'no change against {RECORDED}\n'))

    def test_compare_names_the_changed_cases_and_fields(self):
        old = json.loads(RECORDED.read_text(encoding='utf-8'))
        row = old['cases']['notes'][1]  # dev-old-decision, as if an older version had missed its fact
        row.update(required_found=0, missing=['We chose PostgreSQL for the application.'], notes=0)
        old['cases']['relevant'][2]['stale_included'] = []  # ... and had not sent dev-correction's stale fact
        old['summary']['notes']['dev']['facts_found'] = 5
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'old.json'
            path.write_text(json.dumps(old), encoding='utf-8')
            result = in_process(evaluate, '--compare', str(path))
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stdout.splitlines(), [
            "relevant dev-correction: stale facts appeared: ['We will use MySQL']",
            "notes dev-old-decision: facts gained: ['We chose PostgreSQL for the application.']",
            'notes dev-old-decision: notes 0 -> 1',
            'notes dev summary: facts_found 5 -> 6',
        ])

    def test_compare_refuses_a_file_that_is_not_a_report_even_null_instead_of_printing_the_report(self):
        for text in ('[1, 2]', 'null', '3', '"x"'):
            with self.subTest(text):
                path, result = self.run_on_file('--compare', text)
                self.assertEqual((result.returncode, result.stdout), (2, ''))
                self.assertEqual(result.stderr, f"evaluate.py: {path}: not an evaluate.py report: must be an object "
                                                f"with the fields ['cases', 'summary', 'best_possible'], got {text}\n")

    def test_compare_refuses_rows_without_the_report_fields(self):
        broken = {'cases': {'recent': [{'case': 'dev-latest'}]}, 'summary': {}, 'best_possible': {'cases': [],
                                                                                                'summary': {}}}
        path, result = self.run_on_file('--compare', json.dumps(broken))
        self.assertEqual(result.returncode, 2)
        self.assertEqual(result.stderr, f'evaluate.py: {path}: not an evaluate.py report: missing fields '
                                        'cases.recent[0].split, cases.recent[0].kind, cases.recent[0].turns, '
                                        'cases.recent[0].notes, cases.recent[0].input_tokens, '
                                        'cases.recent[0].within_budget, cases.recent[0].required_found, '
                                        'cases.recent[0].required_total, cases.recent[0].missing, '
                                        'cases.recent[0].stale_included\n')

    def test_compare_refuses_a_row_whose_case_is_not_a_string(self):
        old = json.loads(RECORDED.read_text(encoding='utf-8'))
        old['cases']['notes'][0]['case'] = ['dev-latest']
        path, result = self.run_on_file('--compare', json.dumps(old))
        self.assertEqual((result.returncode, result.stderr),
                         (2, f'evaluate.py: {path}: not an evaluate.py report: field cases.notes[0].case must be a '
                             'string, got ["dev-latest"]\n'))

    def test_compare_refuses_a_best_possible_part_without_its_fields(self):
        old = json.loads(RECORDED.read_text(encoding='utf-8'))
        del old['best_possible']['cases'][3]['fact_turns']
        path, result = self.run_on_file('--compare', json.dumps(old))
        self.assertEqual((result.returncode, result.stderr),
                         (2, f'evaluate.py: {path}: not an evaluate.py report: missing field '
                             'best_possible.cases[3].fact_turns\n'))

    def test_compare_refuses_a_report_from_before_the_best_possible_instead_of_a_traceback(self):
        old = json.loads(RECORDED.read_text(encoding='utf-8'))
        del old['best_possible']
        path, result = self.run_on_file('--compare', json.dumps(old))
        self.assertEqual((result.returncode, result.stdout), (2, ''))
        self.assertEqual(result.stderr,
                         f'evaluate.py: {path}: not an evaluate.py report: missing field best_possible\n')

    def test_compare_refuses_turns_that_are_not_turn_indices_instead_of_a_traceback(self):
        for where, change, expected in (
                ('cases.recent[1].turns', lambda old: old['cases']['recent'][1].update(turns='x'), '"x"'),
                ('best_possible.cases[2].fact_turns',
                 lambda old: old['best_possible']['cases'][2].update(fact_turns=['a']), '["a"]')):
            with self.subTest(where):
                old = json.loads(RECORDED.read_text(encoding='utf-8'))
                change(old)
                path, result = self.run_on_file('--compare', json.dumps(old))
                self.assertEqual((result.returncode, result.stderr),
                                 (2, f'evaluate.py: {path}: not an evaluate.py report: field {where} must be a list '
                                     f'of turn indices, got {expected}\n'))

    def test_compare_with_a_table_format_is_a_usage_error(self):
        result = in_process(evaluate, '--compare', str(RECORDED), '--format', 'table')
        self.assertEqual(result.returncode, 2)
        self.assertIn('--compare prints changes, not a table', result.stderr)

    def test_output_that_cannot_be_written_exits_2_and_leaves_no_temporary_file(self):
        with tempfile.TemporaryDirectory() as folder:
            for target in (Path(folder) / 'missing' / 'report.json', Path(folder)):
                with self.subTest(target=target.name):
                    status, out, err = lab_main(evaluate, '--output', str(target))
                    self.assertEqual((status, out), (2, ''))
                    self.assertTrue(err.startswith(f'evaluate.py: {target}: cannot write the report: '), err)
                    self.assertEqual(err.count('\n'), 1)
            self.assertEqual(list(Path(folder).iterdir()), [])

    def test_output_writes_the_report_it_prints(self):
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'report.json'
            result = in_process(evaluate, '--output', str(path))
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(path.read_text(encoding='utf-8'), result.stdout)
            self.assertEqual(path.stat().st_mode & 0o777, 0o644)
            self.assertEqual(sorted(p.name for p in Path(folder).iterdir()), ['report.json'])

    def test_large_case_set_shows_progress_on_stderr_only(self):
        template = shipped_cases()['dev-latest']
        many = [dict(copy.deepcopy(template), id=f'copy-{n}') for n in range(101)]
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'many.json'
            path.write_text(json.dumps(many), encoding='utf-8')
            status, out, err = lab_main(evaluate, '--cases', str(path), '--format', 'table')
        self.assertEqual(status, 0, err)
        self.assertIn('evaluate.py: 101 of 101 cases\n', err)
        self.assertNotIn('of 101 cases', out)
        self.assertIn('| recent | dev | 101 of 101 | 101 of 101 | 0 |', out)


class OutputIsInputTest(unittest.TestCase):
    def test_an_output_that_is_the_case_set_or_the_report_compared_with_is_refused_and_both_stay(self):
        with tempfile.TemporaryDirectory() as folder:
            mine, old = Path(folder) / 'my.json', Path(folder) / 'old.json'
            mine.write_bytes((HERE / 'cases.json').read_bytes())
            old.write_bytes(RECORDED.read_bytes())
            (Path(folder) / 'link.json').symlink_to('my.json')
            for args, output, what in (
                    (['--cases', str(mine)], Path(folder) / 'link.json', f'--cases {mine}'),
                    (['--compare', str(old)], Path(folder) / '.' / 'old.json', f'--compare {old}')):
                with self.subTest(what):
                    result = in_process(evaluate, *args, '--output', str(output))
                    self.assertEqual((result.returncode, result.stdout, result.stderr), (2, '', (
                        f'evaluate.py: --output {output}: the same file as {what}, which this run reads; write '
                        'the output elsewhere\n')))
            self.assertEqual(mine.read_bytes(), (HERE / 'cases.json').read_bytes())
            self.assertEqual(old.read_bytes(), RECORDED.read_bytes())
            self.assertEqual(sorted(path.name for path in Path(folder).iterdir()), ['link.json', 'my.json', 'old.json'])


class SignalTest(unittest.TestCase):
    def test_sigterm_mid_run_says_nothing_was_written_exits_130_and_leaves_no_file(self):
        template = shipped_cases()['dev-latest']
        many = [dict(copy.deepcopy(template), id=f'copy-{n}') for n in range(2000)]  # progress lines, then more
        with tempfile.TemporaryDirectory() as folder:
            path, output = Path(folder) / 'many.json', Path(folder) / 'report.json'
            path.write_text(json.dumps(many), encoding='utf-8')
            environment = {key: value for key, value in os.environ.items() if key != PREPARED_ENV}
            process = subprocess.Popen([sys.executable, 'evaluate.py', '--cases', str(path), '--output', str(output)],
                                       cwd=HERE, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True)
            try:
                first = process.stderr.readline()  # main is grading: the first progress line
                process.terminate()  # a real SIGTERM
                out, rest = process.communicate(timeout=120)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
            self.assertEqual(first, 'evaluate.py: 100 of 2000 cases\n')
            self.assertEqual((process.returncode, out, rest.splitlines()[-1]),
                             (130, '', 'evaluate.py: interrupted; nothing was written'))
            self.assertEqual([line for line in rest.splitlines() if not line.startswith('evaluate.py: ')], [])
            self.assertEqual(sorted(p.name for p in Path(folder).iterdir()), ['many.json'])


class EncodingTest(unittest.TestCase):
    def test_an_ascii_only_output_is_one_line_not_a_traceback(self):
        environment = {key: value for key, value in os.environ.items() if key != PREPARED_ENV}
        result = subprocess.run([sys.executable, 'evaluate.py', '--show', 'dev-latest', '--strategy', 'recent'],
                                cwd=HERE, capture_output=True, text=True, timeout=300,
                                env=environment | {'PYTHONIOENCODING': 'ascii'})
        self.assertEqual((result.returncode, result.stdout, result.stderr), (2, '', (
            "evaluate.py: the output cannot be written as ascii (it holds '\\xb7'); set PYTHONIOENCODING=utf-8\n")))


if __name__ == '__main__':
    unittest.main()
