"""Tests for the files `answer_check.py` reads: each one a user can break gives exit 2 and one line naming it,
and a recording names its cases by the bytes it read.

    .venv/bin/python -m unittest -v test_answer_check_inputs.py

The answer check's other tests: test_answer_check_own.py (one's own model, cases and rule),
test_answer_check_grading.py (which recordings are graded), test_answer_record_*.py (the recording run),
test_answer_keys_regex.py and test_answer_keys_f1.py (the two graders), test_ollama_client.py (the client).
Commands run through common.run, as a user's do, against the fake Ollama server of test_support.py on
127.0.0.1; no model is called. Every file a test writes goes to a temporary directory; the shipped files are only
read. Every HTTP request in these tests is checked to go to 127.0.0.1, and OLLAMA_HOST points at a closed loopback
port, so no test can reach a real server.
"""
import hashlib
import json
from pathlib import Path
import unittest
from unittest import mock

import answer_check
from answer_model import load_model
from test_support import only_loopback as setUpModule
from test_support_fixtures import AnswerFilesTest, HERE
from test_support_runs import run_answer_check, run_command


class InputFilesTest(AnswerFilesTest):
    """Every file a user can break gives exit 2 and one line naming it; nothing is written."""

    def setUp(self):
        super().setUp()
        self.result.write_text(json.dumps({'model': load_model(), 'answers': {}}))

    def write(self, name: str, data) -> Path:
        path = self.folder / name
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        return path

    def assert_one_line_error(self, expected_start: str, argv: tuple = (), **paths) -> str:
        paths = {'result_path': self.result, 'grades_path': self.grades, **paths}
        code, out, err = run_answer_check(list(argv), **paths)
        self.assertEqual((code, out), (2, ''), err)
        self.assertTrue(err.startswith(f'answer_check.py: {expected_start}'), err)
        self.assertEqual(err.count('\n'), 1, err)
        self.assertFalse(self.grades.exists())
        return err

    def test_unreadable_json_file_gives_exit_2_and_one_line_naming_the_file(self):
        bad = self.write('broken.json', '{"keys": ')
        for argument, argv in (('keys_path', ()), ('model_path', ('record',)), ('result_path', ()),
                               ('model_path', ('--model', str(bad)))):  # grading reads a pin only when told to
            with self.subTest(argument=argument, argv=argv):
                message = self.assert_one_line_error(f'{bad}: ', argv, **{argument: bad})
                self.assertIn('invalid JSON at line 1 column 10', message)

    def test_missing_file_and_folder_give_exit_2(self):
        missing = self.folder / 'nowhere.json'
        self.assert_one_line_error(f'{missing}: cannot read the answer keys: No such file or directory',
                                   keys_path=missing)
        self.assert_one_line_error(f'{self.folder}: cannot read the recording: Is a directory',
                                   result_path=self.folder)
        unwritable = self.folder / 'no-such-folder' / 'answer-grades.json'
        self.assert_one_line_error(f'{unwritable}: cannot write the answer grades: No such file or directory',
                                   grades_path=unwritable)

    def test_bad_answer_model_json_gives_exit_2(self):
        pinned = load_model()
        for field, value in (('ollama_digest', 'b37049369adf'), ('ollama_tag', ''), ('seeds', [1, 2, 3, 4, True]),
                             ('trials', '5'), ('options', {'temperature': '1', 'top_k': 64, 'top_p': 0.95})):
            with self.subTest(field=field):
                bad = self.write('answer-model.json', {**pinned, field: value})
                self.assertIn(field, self.assert_one_line_error(f'{bad}: ', ['--model', str(bad)]))

    def test_answer_model_command_exits_2_with_one_line(self):
        code, out, err = run_answer_check(['check'])  # OLLAMA_HOST: a closed port
        self.assertEqual((code, out), (2, ''))
        self.assertTrue(err.startswith('answer_check.py: no Ollama server answers at http://127.0.0.1:'), err)
        self.assertEqual(err.count('\n'), 1)

    def test_no_server_is_said_before_the_requests_are_counted(self):
        # Counting the 120 requests loads the counter and runs every rule: seconds spent before saying there is no
        # server, 6-7 s for a new user. The server is asked first.
        with mock.patch.object(answer_check, 'planned_requests', side_effect=AssertionError('counted first')):
            code, out, err = run_answer_check(['record'], result_path=self.result, grades_path=self.grades)
        self.assertEqual((code, out), (2, ''))
        self.assertTrue(err.startswith('answer_check.py: no Ollama server answers at http://127.0.0.1:'), err)

    def test_usage_errors_exit_2(self):
        for main, argv in ((answer_check.main, ['grade']), (answer_check.main, ['record', 'again']),
                           (answer_check.main, ['--fresh']), (answer_check.main, ['check', '--host'])):
            with self.subTest(main=main.__module__, argv=argv):
                self.assertEqual(run_command(main, argv, f'{main.__module__}.py')[0], 2)


class CaseFileHashTest(AnswerFilesTest):
    def test_a_recording_names_its_cases_by_the_bytes_read_even_if_the_file_changes_meanwhile(self):
        cases = self.folder / 'cases.json'
        original = (HERE / 'cases.json').read_bytes()
        cases.write_bytes(original)
        real, chosen = answer_check.planned_requests, {}

        def edit_then_plan(*args):  # the file changes after it was read, before the recording names it
            cases.write_text('[]', encoding='utf-8')
            return real(*args)

        def stop(plan, client, result_path, fresh, recorded_as, record_command):
            chosen.update(recorded_as)
            raise answer_check.LabError('stopped before any call')

        with mock.patch.object(answer_check, 'planned_requests', edit_then_plan), \
                mock.patch.object(answer_check, 'record_answers', stop):
            status, _, _ = run_answer_check(['record', '--cases', str(cases)], result_path=self.result,
                                            grades_path=self.grades, client=mock.Mock())
        self.assertEqual((status, chosen['cases_sha256']), (2, hashlib.sha256(original).hexdigest()))


if __name__ == '__main__':
    unittest.main()
