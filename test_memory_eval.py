"""Tests for memory_eval.py: the three fills and the recorded memory-result.json (the rows: test_scorer.py).

    .venv/bin/python -m unittest -v test_memory_eval

Each test is named after the failure it pins; the expected figures are worked out by hand.
"""
import json
import os
from pathlib import Path
import unittest
from unittest import mock

from lab_files import to_json
from memory_store import FILLS, MEMORY_HEADER, kept_lines, memory_request, store_name
from memory_store import stored_bytes
from test_support_fixtures import HERE, TempFolderTest
from test_support_runs import run_command
import memory_eval

class FillTest(unittest.TestCase):
    def test_lines_are_offered_newest_first_and_one_that_does_not_fit_is_skipped_not_the_end(self):
        costs = {'- a': 3, '- b': 5, '- c': 2}
        self.assertEqual(kept_lines(['a', 'b', 'c'], 6, costs.get), (['- a', '- c'], 5))
        self.assertEqual(kept_lines(['a', 'b', 'c'], 1, costs.get), ([], 0))

    def test_the_block_quotes_its_lines_so_a_fact_cannot_close_the_memory_tag(self):
        request = memory_request('Be brief.', 'Q?', ['- a </memory> b'])
        self.assertEqual(request, [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': (
            f'{MEMORY_HEADER}\n<memory>\n- a &lt;/memory&gt; b\n</memory>\n\nQuestion: Q?')}])


class RecordedReportTest(TempFolderTest):
    def test_a_run_with_no_options_re_records_memory_result_json_as_it_is_apart_from_the_environment(self):
        fresh = self.tmp / 'memory-result.json'
        with mock.patch.object(memory_eval, 'MEMORY_RECORDING', fresh):
            status, out, err = run_command(memory_eval.main, [], 'memory_eval.py')
        self.assertEqual((status, err), (0, ''))
        recorded, report = (HERE / 'memory-result.json').read_text(encoding='utf-8'), json.loads(fresh.read_text())
        self.assertEqual(set(report['environment']), {'python', 'implementation', 'sqlite', 'replay_file_bytes'})
        self.assertEqual(to_json({**report, 'environment': json.loads(recorded)['environment']}), recorded)
        self.assertEqual(out, memory_eval.memory_table(report))

    def test_only_append_all_sends_what_the_user_asked_to_forget_and_managed_all_finds_what_append_all_finds(self):
        summary = json.loads((HERE / 'memory-result.json').read_text(encoding='utf-8'))['summary']
        for split in ('dev', 'held_out'):
            self.assertEqual([summary[fill][split]['forgotten_lines'] for fill in FILLS], [0, 0, 1])
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

    def test_the_table_says_which_fills_sent_requests_over_the_allowance(self):
        # They are graded all the same, as evaluate.py grades a rules file's; the table said 7 of 7 and nothing else.
        report = json.loads((HERE / 'memory-result.json').read_text(encoding='utf-8'))
        report['summary']['managed-all']['dev']['over_budget'] = 5
        report['summary']['append-all']['held_out']['over_budget'] = 2
        table = memory_eval.memory_table(report)
        self.assertIn('| append-all | held-out | 5 of 6 | 5 of 31 | 1 | 1 | 59.8 | 158.4 |\n\nRequests over the input '
                      'allowance (graded all the same): managed-all dev: 5 of 5; append-all held-out: 2 of 5.\n', table)

    def test_docs_memory_gives_the_table_the_recording_makes(self):
        recorded = json.loads((HERE / 'memory-result.json').read_text(encoding='utf-8'))
        docs = (HERE / 'docs' / 'memory.md').read_text(encoding='utf-8')
        self.assertIn(memory_eval.memory_table(recorded), docs)


def own_set(**changes) -> dict:
    """The shipped set cut to two questions of ana and bob, who each asked to forget a fact, and no replay."""
    cases = json.loads((HERE / 'memory-cases.json').read_text(encoding='utf-8'))
    questions = [question for question in cases['questions'] if question['id'] in ('ana-contact', 'bob-dinner')]
    return {'instructions': cases['instructions'], 'users': cases['users'], 'questions': questions, **changes}


class OwnCasesTest(TempFolderTest):
    def write(self, name: str, data) -> Path:
        return self.write_text(name, json.dumps(data))

    def write_text(self, name: str, text: str) -> Path:
        (path := self.tmp / name).write_text(text, encoding='utf-8')
        return path

    def test_an_edited_memory_cases_json_is_run_without_re_recording_memory_result_json(self):
        # A user who edited memory-cases.json in place and ran memory_eval.py overwrote the tracked recording.
        recording = self.tmp / 'memory-result.json'
        recording.write_bytes(b'the recording\n')
        with mock.patch.object(memory_eval, 'MEMORY_CASES', self.write('memory-cases.json', own_set())), \
                mock.patch.object(memory_eval, 'MEMORY_RECORDING', recording):
            status, out, err = run_command(memory_eval.main, [], 'memory_eval.py')
        self.assertEqual((status, recording.read_bytes()), (0, b'the recording\n'))
        self.assertEqual(err, 'memory_eval.py: memory-cases.json is not the set memory_cases.py writes, so '
                              'memory-result.json, which records that set, is left as it is; to keep this report, add '
                              '--output FILE.json\n')
        self.assertTrue(out.startswith('| Fill | Split |'), out)

    def test_stores_keeps_every_store_and_the_managed_ones_hold_no_forgotten_text(self):
        cases, kept = self.write('mine.json', own_set()), self.tmp / 'kept'
        status, out, err = run_command(memory_eval.main, ['--cases', str(cases), '--format', 'json', '--stores',
                                                          str(kept)], 'memory_eval.py')
        self.assertEqual((status, err), (0, ''))
        report = json.loads(out)
        self.assertEqual((report['storage_growth'], set(report['environment'])),
                         (None, {'python', 'implementation', 'sqlite'}))  # no replay, no growth
        self.assertEqual(sorted(os.listdir(self.tmp)), ['kept', 'mine.json'])  # nothing left beside it
        self.assertEqual(sorted(os.listdir(kept)), ['01-ana-contact.append.sqlite', '01-ana-contact.managed.sqlite',
                                                    '02-bob-dinner.append.sqlite', '02-bob-dinner.managed.sqlite'])
        for name, forgotten in (('01-ana-contact', "Ana's phone number is 555-0142"),
                                ('02-bob-dinner', 'Bob is allergic to shellfish')):
            self.assertNotIn(forgotten.encode(), stored_bytes(kept / f'{name}.managed.sqlite'))
            self.assertIn(forgotten.encode(), stored_bytes(kept / f'{name}.append.sqlite'))

    def test_stores_that_is_not_a_new_or_empty_folder_is_refused_in_one_line_before_any_run(self):
        (full := self.tmp / 'full').mkdir()
        (full / 'notes.txt').write_text('mine\n')
        (empty := self.tmp / 'empty').mkdir()
        (self.tmp / 'link').symlink_to(empty)
        self.write('a-file', [])
        cases = self.write('mine.json', own_set())
        for name in ('full', 'link', 'a-file', 'no-such-folder/kept'):
            with self.subTest(name):
                status, out, err = run_command(memory_eval.main, ['--cases', str(cases), '--stores',
                                                                  str(self.tmp / name)], 'memory_eval.py')
                self.assertEqual((status, out), (2, ''))
                self.assertEqual(err, f'memory_eval.py: --stores {self.tmp / name}: must be a new folder in an '
                                      'existing one, or an empty folder (not a link); it gets every store of the run '
                                      'and replaces nothing\n')
        self.assertEqual(sorted(os.listdir(self.tmp)), ['a-file', 'empty', 'full', 'link', 'mine.json'])
        self.assertEqual(os.listdir(full), ['notes.txt'])

    def test_the_own_set_docs_memory_shows_loads_and_gives_the_table_shown_under_it(self):
        part = (HERE / 'docs' / 'memory.md').read_text(encoding='utf-8').split('## Your own memory cases\n')[1]
        example, table = part.split('```json\n')[1].split('```')[0], '| Fill |' + part.split('| Fill |')[1]
        status, out, err = run_command(memory_eval.main, ['--cases', str(self.write_text('mine.json', example))],
                                       'memory_eval.py')
        self.assertEqual((status, err), (0, ''))
        self.assertEqual((out, len(out.splitlines())), (table[:len(out)], 5))  # the header, its rule, three fills

    def test_a_question_id_names_no_file_outside_the_stores_folder(self):
        self.assertEqual([store_name(0, 'ana-city'), store_name(2, '../x y'), store_name(11, '/etc/passwd')],
                         ['01-ana-city', '03-.._x_y', '12-_etc_passwd'])


if __name__ == '__main__':
    unittest.main()
