"""Tests for the partial file a recording run keeps: it grows by a line per answer, a line that is no kept
answer costs only its own, and a file that cannot be read or written is one line, which `--fresh` recovers from.

    .venv/bin/python -m unittest -v test_answer_record_partial.py

They run the real client and recording against a fake Ollama server on 127.0.0.1, as test_support_record.py
says; no model is called, no test can reach a real server, and every file a test writes is a temporary one.
"""
import json
from pathlib import Path
import unittest

from test_support import FakeOllama, only_loopback as setUpModule, reply
from test_support_fixtures import PYTHON
from test_support_record import AnswerRecordTest, steady_reply


class RecordTest(AnswerRecordTest):
    def stopped_at(self, call: int) -> tuple[bytes, Path, list[str]]:
        """(the whole recording made without a stop, the partial file of a run a busy server stopped at `call`, its
        lines)."""
        whole = self.uninterrupted_sample()
        self.assertEqual(self.sampled([], lambda body, n: (503, {'error': 'busy'}) if n == call else
                                      steady_reply(body, n))[0], 2)
        partial = self.folder / 'answer-result.partial.json'
        return whole, partial, partial.read_text().splitlines()

    def test_the_partial_file_grows_by_one_line_per_answer_and_is_never_rewritten(self):
        partial, seen = self.folder / 'answer-result.partial.json', []

        def watching(body, number):
            seen.append(partial.read_bytes())
            return steady_reply(body, number)
        code, out, err, fake = self.sampled([], watching)
        self.assertEqual(code, 0, err)
        self.assertTrue(all(after.startswith(before) for before, after in zip(seen, seen[1:])))
        # The model block; then the first answer and the context the server loaded; then one answer a call.
        self.assertEqual([after[len(before):].count(b'\n') for before, after in zip(seen, seen[1:])], [2] + [1] * 18)
        self.assertEqual(seen[0].count(b'\n'), 1)

    def test_lines_that_are_no_kept_answer_cost_only_their_own(self):
        whole, partial, lines = self.stopped_at(12)
        lines[4] = '{"strategy": "recent", "case": "held-latest", "answer": {"seed": "3"}}'
        partial.write_text('\n'.join(lines)[:-20])  # and the last line cut off, as a kill while writing leaves it
        code, out, err, fake = self.sampled([])
        self.assertEqual(code, 0, err)
        self.assertEqual(len(fake.chats()), 20 - 11 + 2)
        self.assertIn('answer-result.partial.json: line 5 is not a kept answer (answer: must be an object with exactly '
                      'the fields', err)
        self.assertIn('answer-result.partial.json: line 13 is not a kept answer (', err)
        self.assertEqual(self.result.read_bytes(), whole)

    def test_kept_line_naming_its_rule_by_a_list_costs_its_answer_not_a_traceback(self):
        whole, partial, lines = self.stopped_at(4)
        entry = json.loads(lines[1])
        lines[1] = json.dumps({**entry, 'strategy': [entry['strategy']]})
        partial.write_text('\n'.join(lines) + '\n')
        code, out, err, fake = self.sampled([])
        self.assertEqual(code, 0, err)
        self.assertEqual(len(fake.chats()), 20 - 3 + 1)
        self.assertIn('answer-result.partial.json: line 2 is not a kept answer (line: field strategy must be a '
                      'non-empty string, got ["recent"]', err)
        self.assertEqual(self.result.read_bytes(), whole)

    def test_unreadable_partial_file_gives_one_line_and_fresh_recovers(self):
        partial = self.folder / 'answer-result.partial.json'
        partial.write_text('{"ollama_digest": ')
        with FakeOllama(chat=steady_reply) as fake:
            code, out, err = self.run_main(['record'], fake.host)
            self.assertEqual((code, fake.chats()), (2, []))
            self.assertTrue(err.endswith(f'answer_check.py: {partial}: cannot be read as a partial recording '
                                         '(Expecting value: line 1 column 19 (char 18)); discard it with '
                                         f'`{PYTHON} answer_check.py record --fresh`\n'), err)
            self.assertEqual(self.run_main(['record', '--fresh'], fake.host)[0], 0)

    def test_partial_file_that_opens_with_no_model_block_names_the_field_in_one_line(self):
        partial = self.folder / 'answer-result.partial.json'
        for header, problem in (('{"model": [1]}', 'line 1: field model must be an object, got [1]'),
                                ('{"modle": {}}', "line 1: must be an object with exactly the fields ['model']; "
                                                  "missing ['model'], unexpected ['modle']")):
            with self.subTest(header=header), FakeOllama(chat=steady_reply) as fake:
                partial.write_text(header + '\n')
                code, out, err = self.run_main(['record'], fake.host)
                self.assertEqual((code, fake.chats()), (2, []))
                self.assertEqual(err.splitlines()[-1], f'answer_check.py: {partial}: {problem}; '
                                 f'discard it with `{PYTHON} answer_check.py record --fresh`')

    def test_fresh_with_a_folder_for_the_partial_file_is_one_line_and_no_call(self):
        partial = self.folder / 'answer-result.partial.json'
        partial.mkdir()
        for argv in (['record', '--fresh'], ['record']):
            with self.subTest(argv=argv), FakeOllama() as fake:
                code, out, err = self.run_main(argv, fake.host)
            self.assertEqual((code, out, fake.requests, partial.is_dir()), (2, '', [], True))
            self.assertEqual(err, f'answer_check.py: {partial}: not a file, so it cannot keep the answers so far; '
                                  'move it away, then run again\n')

    def test_answer_that_is_not_unicode_stops_the_recording_with_one_line(self):
        def lone_surrogate(body, number):  # JSON may escape half of a UTF-16 pair, which UTF-8 cannot store
            return (200, reply('Mateo \ud800')) if number == 3 else steady_reply(body, number)
        with FakeOllama(chat=lone_surrogate) as fake:
            code, out, err = self.run_main(['record'], fake.host)
        partial = self.folder / 'answer-result.partial.json'
        self.assertEqual((code, out, len(fake.chats())), (2, '', 3))
        self.assertNotIn('Traceback', err)
        self.assertEqual(err.splitlines()[-1].split(' at ')[0], f'answer_check.py: {partial}: not written: the '
                         'data holds text that is not valid Unicode (surrogates not allowed')
        self.assertEqual(len(self.partial()), 4)  # the model block, two answers and the loaded context
        self.assertEqual(self.kept(), 2)  # the answers before it are kept, for the next run


if __name__ == '__main__':
    unittest.main()
