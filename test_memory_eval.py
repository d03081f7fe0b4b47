"""Tests for memory_eval.py: the three fills, their grading by exact text, and the recorded memory-result.json.

    .venv/bin/python -m unittest -v test_memory_eval

Each test is named after the failure it pins; the expected figures are worked out by hand.
"""
import json
import unittest

from lab_files import to_json
from memory_eval import MEMORY_HEADER, graded, kept_lines, memory_request, memory_totals
from test_support_fixtures import HERE
from test_support_runs import run_command
import memory_eval

QUESTION = {'id': 'q', 'user': 'ana', 'split': 'dev', 'kind': 'k', 'question': 'Where do I live?',
            'required': ['Ana lives in Porto'], 'stale': ['Ana lives in Lyon'], 'forgotten': ['555-0142'],
            'facts_quota': 40, 'budget': {'context_limit': 512, 'max_new_tokens': 96, 'margin': 32}}


class FillTest(unittest.TestCase):
    def test_lines_are_offered_newest_first_and_one_that_does_not_fit_is_skipped_not_the_end(self):
        costs = {'- a': 3, '- b': 5, '- c': 2}
        self.assertEqual(kept_lines(['a', 'b', 'c'], 6, costs.get), (['- a', '- c'], 5))
        self.assertEqual(kept_lines(['a', 'b', 'c'], 1, costs.get), ([], 0))

    def test_the_block_quotes_its_lines_so_a_fact_cannot_close_the_memory_tag(self):
        request = memory_request('Be brief.', 'Q?', ['- a </memory> b'])
        self.assertEqual(request, [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': (
            f'{MEMORY_HEADER}\n<memory>\n- a &lt;/memory&gt; b\n</memory>\n\nQuestion: Q?')}])


class GradeTest(unittest.TestCase):
    def test_each_line_is_graded_by_the_facts_it_holds(self):
        lines = ['- Ana lives in Lyon', '- Ana lives in Porto', '- Ana phone 555-0142', '- Ana eats no meat']
        row = graded(QUESTION, lines, 30, 120)
        self.assertEqual({key: row[key] for key in ('lines', 'useful_lines', 'stale_lines', 'forgotten_lines',
                                                     'required_found', 'missing', 'within_budget')},
                         {'lines': 4, 'useful_lines': 1, 'stale_lines': 1, 'forgotten_lines': 1, 'required_found': 1,
                          'missing': [], 'within_budget': True})

    def test_a_row_names_the_missing_and_stale_facts_the_answer_check_joins_its_answers_with(self):
        # answer_keys.key_grades reads both to say whether a failure was the fill's or the model's.
        row = graded(QUESTION, ['- Ana lives in Lyon'], 6, 90)
        self.assertEqual((row['missing'], row['stale_included']), (['Ana lives in Porto'], ['Ana lives in Lyon']))
        self.assertEqual(graded(QUESTION, ['- Ana lives in Porto'], 6, 90)['stale_included'], [])

    def test_totals_give_recall_of_facts_and_usefulness_of_lines(self):
        rows = [graded(QUESTION, ['- Ana lives in Porto', '- Ana lives in Lyon'], 12, 100),
                graded(QUESTION, [], 0, 60)]
        self.assertEqual(memory_totals(rows), {'questions': 2, 'required_found': 1, 'required_total': 2, 'recall': 0.5,
                                        'lines': 2, 'useful_lines': 1, 'usefulness': 0.5, 'stale_lines': 1,
                                        'forgotten_lines': 0, 'mean_memory_tokens': 6.0, 'mean_input_tokens': 80.0,
                                        'over_budget': 0})


class RecordedReportTest(unittest.TestCase):
    def test_a_fresh_run_equals_memory_result_json_apart_from_the_environment(self):
        status, out, err = run_command(memory_eval.main, ['--format', 'json'], 'memory_eval.py')
        self.assertEqual((status, err), (0, ''))
        recorded = (HERE / 'memory-result.json').read_text(encoding='utf-8')
        fresh = json.loads(out)
        self.assertEqual(set(fresh['environment']), {'python', 'implementation', 'sqlite', 'replay_file_bytes'})
        self.assertEqual(to_json({**fresh, 'environment': json.loads(recorded)['environment']}), recorded)

    def test_only_append_all_sends_what_the_user_asked_to_forget_and_managed_all_finds_what_append_all_finds(self):
        summary = json.loads((HERE / 'memory-result.json').read_text(encoding='utf-8'))['summary']
        for split in ('dev', 'held_out'):
            self.assertEqual([summary[fill][split]['forgotten_lines'] for fill in memory_eval.FILLS], [0, 0, 1])
            self.assertEqual(summary['managed-all'][split]['required_found'],
                             summary['append-all'][split]['required_found'])

    def test_the_replay_is_sampled_every_20_turns_and_only_the_managed_store_keeps_deletion_records(self):
        growth = json.loads((HERE / 'memory-result.json').read_text(encoding='utf-8'))['storage_growth']
        self.assertEqual([sample['turn'] for sample in growth], list(range(20, 201, 20)))
        self.assertEqual(growth[-1], {'turn': 200, 'managed': {'stored': 24, 'current': 12, 'superseded': 12,
                                                                'deletions': 12},
                                      'append_only': {'stored': 48, 'current': 48, 'superseded': 0, 'deletions': 0}})

    def test_a_memory_case_set_the_loader_refuses_is_one_line_and_exit_2(self):
        status, out, err = run_command(memory_eval.main, ['--cases', str(HERE / 'cases.json')], 'memory_eval.py')
        self.assertEqual((status, out), (2, ''))
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertTrue(err.startswith(f'memory_eval.py: {HERE / "cases.json"}: '), err)

    def test_docs_memory_gives_the_table_the_recording_makes(self):
        recorded = json.loads((HERE / 'memory-result.json').read_text(encoding='utf-8'))
        docs = (HERE / 'docs' / 'memory.md').read_text(encoding='utf-8')
        self.assertIn(memory_eval.memory_table(recorded), docs)
