"""Tests for the LoCoMo files locomo_cases.py refuses: one line naming the file, the place and what was expected.

    .venv/bin/python -m unittest -v test_locomo_cases_errors.py

The bad inputs are variations of test_support_locomo's small file in LoCoMo's shape. Each test is named after
the failure it pins (a traceback, a half-written output, a refusal that names the wrong thing); files are only
ever written into temporary directories.
"""
import json
from pathlib import Path
import subprocess
import sys
import tempfile
import unittest

from test_support_fixtures import HERE
from test_support_locomo import EXPECTED_SUMMARY, convert, locomo_question, locomo_sample


class BadInputTest(unittest.TestCase):
    def test_each_bad_input_exits_2_with_one_line_and_writes_nothing(self):
        def changed(change):
            data = locomo_sample()
            change(data)
            return data

        def conversation(data):
            return data[0]['conversation']

        table_of_inputs = [
            ('invalid JSON', '[{"sample_id": ', 'invalid JSON at line 1 column 16: Expecting value'),
            ('not a list', '{"sample_id": "one"}', "expected LoCoMo's shape, a non-empty list of samples"),
            ('sample not an object', '[7]', 'sample at index 0: expected an object, got int'),
            ('no sample id', changed(lambda d: d[1].pop('sample_id')),
             'sample at index 1: missing field sample_id'),
            ('repeated sample id', changed(lambda d: d[1].update(sample_id='one')),
             'sample one: field sample_id repeats an earlier sample'),
            ('no conversation', changed(lambda d: d[0].pop('conversation')),
             'sample one: missing field conversation'),
            ('qa not a list', changed(lambda d: d[1].update(qa={})),
             'sample two: field qa must be a list of questions, got {}'),
            ('no speaker_b', changed(lambda d: conversation(d).pop('speaker_b')),
             'sample one: missing field conversation.speaker_b'),
            ('no sessions', changed(lambda d: d[1].update(conversation={'speaker_a': 'Cy', 'speaker_b': 'Di'})),
             'sample two: field conversation holds no session_N list'),
            ('no session date', changed(lambda d: conversation(d).pop('session_2_date_time')),
             'sample one: missing field conversation.session_2_date_time'),
            ('empty session', changed(lambda d: conversation(d).update(session_2=[])),
             'sample one: field conversation.session_2 must be a non-empty list of utterances, got []'),
            ('unknown speaker', changed(lambda d: conversation(d)['session_1'][1].update(speaker='Bob')),
             'sample one: field conversation.session_1[1].speaker must be one of [\'Ann\', \'Ben\'], got "Bob"'),
            ('speaker twice in a row', changed(lambda d: conversation(d)['session_2'][1].update(speaker='Ben')),
             'sample one: field conversation.session_2[1].speaker repeats the previous speaker; '
             'LoCoMo alternates speakers'),
            ('no text', changed(lambda d: conversation(d)['session_1'][0].pop('text')),
             'sample one: missing field conversation.session_1[0].text'),
            ('caption not text', changed(lambda d: conversation(d)['session_1'][1].update(blip_caption=None)),
             'sample one: field conversation.session_1[1].blip_caption must be a non-empty string, got null'),
            ('bad utterance id', changed(lambda d: conversation(d)['session_1'][0].update(dia_id='1:1')),
             'sample one: field conversation.session_1[0].dia_id must be an id like D1:3, got "1:1"'),
            ('repeated utterance id', changed(lambda d: conversation(d)['session_2'][0].update(dia_id='D1:1')),
             "sample one: field conversation.session_2[0].dia_id repeats 'D1:1'"),
            ('utterance number past 4,300 digits', changed(lambda d: conversation(d)['session_1'][0].update(
                dia_id='D1:' + '9' * 5000)),  # int() would refuse it with a traceback
             f'sample one: field conversation.session_1[0].dia_id must be an id like D1:3, got "D1:{"9" * 33}...'),
            ('session number past 4,300 digits', changed(lambda d: d[1].update(conversation={
                'speaker_a': 'Cy', 'speaker_b': 'Di', 'session_' + '1' * 5000: []})),
             'sample two: field conversation holds no session_N list'),
            ('unknown category', changed(lambda d: d[1]['qa'][0].update(category=6)),
             'sample two: field qa[0].category must be one of [1, 2, 3, 4, 5], got 6'),
            ('category as a float', changed(lambda d: d[1]['qa'][0].update(category=4.0)),
             'sample two: field qa[0].category must be one of [1, 2, 3, 4, 5], got 4.0'),
            ('evidence not a list', changed(lambda d: d[1]['qa'][0].update(evidence='D1:3')),
             'sample two: field qa[0].evidence must be a list of utterance ids (strings), got "D1:3"'),
            ('evidence entry not a string', changed(lambda d: d[1]['qa'][0].update(evidence=[13])),
             'sample two: field qa[0].evidence must be a list of utterance ids (strings), got [13]'),
            ('no question', changed(lambda d: d[1]['qa'][0].pop('question')),
             'sample two: missing field qa[0].question'),
            ('lone surrogate in a text', changed(lambda d: conversation(d)['session_1'][2].update(text='Miso\ud800')),
             'sample one: question qa[0] as case one-q0: field history[1].user holds a lone surrogate, '
             'which is not text'),
            ('no usable question', changed(lambda d: [sample['qa'].clear() for sample in d]),
             'no question of categories [1, 2, 3, 4] has usable evidence; nothing written'),
        ]
        for name, data, message in table_of_inputs:
            with self.subTest(name), tempfile.TemporaryDirectory() as folder:
                output, result = convert(folder, data)
                source = Path(folder) / 'locomo10.json'
                self.assertEqual((result.returncode, result.stdout, result.stderr),
                                 (2, '', f'locomo_cases.py: {source}: {message}\n'))
                self.assertEqual(sorted(path.name for path in Path(folder).iterdir()), ['locomo10.json'])

    def test_missing_file_and_budget_without_allowance_exit_2_with_one_line(self):
        with tempfile.TemporaryDirectory() as folder:
            missing = Path(folder) / 'nowhere.json'
            result = subprocess.run([sys.executable, 'locomo_cases.py', str(missing), '--output',
                                     str(Path(folder) / 'out.json')], cwd=HERE, capture_output=True, text=True,
                                    timeout=120)
            self.assertEqual((result.returncode, result.stderr),
                             (2, f'locomo_cases.py: {missing}: cannot read the LoCoMo file: '
                                 'No such file or directory\n'))
            output, result = convert(folder, locomo_sample(), '--context-limit', '512')
            self.assertEqual((result.returncode, result.stderr),
                             (2, 'locomo_cases.py: the budget options: field budget leaves no input allowance '
                                 '(context_limit - max_new_tokens - margin must be positive)\n'))
            self.assertFalse(output.exists())

    def test_an_output_that_is_the_locomo_file_is_refused_and_the_download_stays(self):
        with tempfile.TemporaryDirectory() as folder:
            source = Path(folder) / 'locomo10.json'
            (Path(folder) / 'link.json').symlink_to('locomo10.json')
            for output in (source, Path(folder) / 'link.json'):
                with self.subTest(output.name):
                    text = json.dumps(locomo_sample())
                    source.write_text(text, encoding='utf-8')
                    result = subprocess.run([sys.executable, 'locomo_cases.py', str(source), '--output', str(output)],
                                            cwd=HERE, capture_output=True, text=True, timeout=120)
                    self.assertEqual((result.returncode, result.stdout, result.stderr), (2, '', (
                        f'locomo_cases.py: --output {output}: the same file as the LoCoMo file {source}, which this '
                        'run reads; write the output elsewhere\n')))
                    self.assertEqual(source.read_text(encoding='utf-8'), text)

    def test_an_evidence_number_past_4300_digits_is_skipped_as_not_an_id(self):
        data = locomo_sample()
        data[1]['qa'].append(locomo_question('How far?', 4, ['D1:' + '3' * 5000]))
        with tempfile.TemporaryDirectory() as folder:
            _, result = convert(folder, data)
        self.assertEqual((result.returncode, result.stderr), (0, EXPECTED_SUMMARY.replace(
            '12 questions', '13 questions').replace('1 evidence not an id', '2 evidence not an id')))

    def test_unknown_category_option_is_a_usage_error(self):
        for text in ('1,6', '1,x', '', '1,,2', '+2', '\u00b2'):  # '\u00b2' (superscript two) is a digit int() refuses
            with self.subTest(text=text), tempfile.TemporaryDirectory() as folder:
                output, result = convert(folder, locomo_sample(), '--categories', text)
                self.assertEqual(result.returncode, 2)
                self.assertIn(f'expected category numbers from [1, 2, 3, 4, 5] separated by commas, got {text!r}',
                              result.stderr)
        with tempfile.TemporaryDirectory() as folder:
            output, result = convert(folder, locomo_sample(), '--categories', ' 2 ,4')
        self.assertEqual(result.returncode, 0, result.stderr)


if __name__ == '__main__':
    unittest.main()
