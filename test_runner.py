"""Tests for runner.py: every rule on every case in order, and the header every report opens with.

    .venv/bin/python -m unittest -v test_runner   (about 2 s)

Each test is named after the failure it pins: rows out of case order or missing a rule, a header that names the
file by another hash or leaves out what can change a row, a table of another counter that passes for Gemma's.
Expected values are written out by hand.
"""
import hashlib
from pathlib import Path
import unittest

from runner import CODE_FILES, case_selections, report_header, run_rules
from shapes import build_request, selection
from test_support_fixtures import HERE, calling, read, result, said, shipped_cases, user


def nothing(case: dict, count) -> dict:
    """A rule that keeps no turn, counted by a count function that says 10 for any request."""
    return selection(build_request(case, []), [], 0, count(build_request(case, [])))


class RunTest(unittest.TestCase):
    def test_every_rule_has_a_row_per_case_in_case_set_order(self):
        cases = list(shipped_cases().values())[:3]
        rows = run_rules(cases, {'a': nothing, 'b': nothing}, lambda messages: 10)
        self.assertEqual(list(rows), ['a', 'b'])
        self.assertEqual([row['case'] for row in rows['b']], ['dev-latest', 'dev-old-decision', 'dev-correction'])
        self.assertEqual((rows['a'][0]['input_tokens'], rows['a'][0]['turns'], rows['a'][0]['required_found']),
                         (10, [], 0))


    def test_each_request_is_graded_as_the_counter_that_counted_it_renders_it(self):
        # answer_check counts with a pin's counter, not the chosen one: Llama 3's drops the text beside a call.
        case = {'id': 'c', 'split': 'dev', 'kind': 'k', 'instructions': 'i', 'current': 'q', 'tools': [],
                'history': [[user('u'), {**calling(read('c1')), 'content': 'Deploy release-7.'}, result('c1'),
                             said('ok')]], 'required': ['Deploy release-7.'], 'stale': [],
                'budget': {'context_limit': 99, 'max_new_tokens': 1, 'margin': 1}}

        class Named:  # a count function that says 10 for any request, and the counter it stands for
            def __init__(self, name: str):
                self.name = name

            def __call__(self, messages: list[dict]) -> int:
                return 10

        def whole(case: dict, count) -> dict:
            return selection(build_request(case, [0]), [0], 0, count(build_request(case, [0])))

        found = {name: case_selections(case, {'whole': whole}, count)[1]['whole']['required_found']
                 for name, count in (('llama-3.1', Named('llama-3.1')), ('qwen-2.5', Named('qwen-2.5')),
                                     ('unnamed, the chosen gemma-4-e2b', lambda messages: 10))}
        self.assertEqual(found, {'llama-3.1': 0, 'qwen-2.5': 1, 'unnamed, the chosen gemma-4-e2b': 1})


class HeaderTest(unittest.TestCase):
    def test_the_header_names_the_bytes_read_the_code_and_the_counter_in_this_order(self):
        header = report_header(Path('/somewhere/my cases.json'), 'ab' * 32, [], 'budget_sweep.py')
        self.assertEqual(list(header), ['case_set', 'case_set_sha256', 'code_sha256', 'tokenizer_manifest_sha256',
                                        'environment', 'counter'])
        self.assertEqual((header['case_set'], header['case_set_sha256']), ('my cases.json', 'ab' * 32))
        self.assertEqual(list(header['code_sha256']), [*CODE_FILES, 'budget_sweep.py'])
        self.assertEqual(header['code_sha256']['shapes.py'],
                         hashlib.sha256((HERE / 'shapes.py').read_bytes()).hexdigest())

    def test_rules_files_add_their_entry_and_the_module_that_runs_them(self):
        files = [{'file': 'mine.py', 'sha256': '0' * 64}]
        header = report_header(Path('cases.json'), '0' * 64, files)
        self.assertEqual((header['rule_files'], list(header['code_sha256'])[-2:]), (files, ['rule_files.py',
                                                                                        'rules_process.py']))


if __name__ == '__main__':
    unittest.main()
