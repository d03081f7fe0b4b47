"""Tests for the recorded report: the rules, the case set and the grader give the original's rows and figures.

    .venv/bin/python -m unittest -v test_evaluate.py   (about 20 s)

Each test is named after the failure it pins. The figures are exact: selection
and counting are deterministic. The oracles are the original report's rows and
table written out here and figures worked out by hand; every request's count
against the official chat template is test_tokenizer.py's. Files are only ever
written into temporary directories. evaluate.py's command line is test_evaluate_command.py's, the case set it
refuses test_evaluate_case_errors.py's.
"""
import hashlib
import json
from pathlib import Path
import re
import tempfile
import unittest
from unittest import mock

from case_set import load_cases
from lab_files import to_json
from scorer import graded_row
from shapes import allowance
import evaluate
from evaluate import report
import strategies
from strategies import CUES, RULES, notes, recent, relevant
from test_support_fixtures import HERE, RECORDED, shipped_cases, with_recorded_environment
from test_support_runs import evaluate_py
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


if __name__ == '__main__':
    unittest.main()
