"""Tests for which recordings `answer_check.py` grades: a complete one under the build it names, the original's
format as the original graded it, the shipped recordings into their shipped grades; refused, naming what is wrong,
where an answer is missing or repeated or the build is not the pinned one.

    .venv/bin/python -m unittest -v test_answer_check_grading.py

The recordings are written here, except the shipped ones (answer-result.json, qwen-answer-result.json), which are
graded offline.
Commands run through common.run, as a user's do, against the fake Ollama server of test_support.py on
127.0.0.1; no model is called. Every file a test writes goes to a temporary directory; the shipped files are only
read. Every HTTP request in these tests is checked to go to 127.0.0.1, and OLLAMA_HOST points at a closed loopback
port, so no test can reach a real server.
"""
import json
from pathlib import Path
import shutil
import tempfile
import unittest

from answer_model import load_model
from strategies import RULES
from test_support import LOADED_CONTEXT, OTHER, PINNED, SERVER_VERSION, only_loopback as setUpModule
from test_support_fixtures import (AnswerFilesTest, HERE, PYTHON, REDO, held_out_cases, prepared_or_skip,
                                   recorded_answer)
from test_support_runs import run_answer_check


QWEN_RESULT = HERE / 'qwen-answer-result.json'  # the real recording from llama.cpp's server (docs/answer-check.md)


def every_answer(model: dict, text: str = 'Mateo.') -> dict:
    """A complete recording of the default run: the same answer from every rule, to every held-out case and seed."""
    seeds = load_model()['seeds']
    return {'model': model, 'answers': {name: {case['id']: [recorded_answer(text, seed) for seed in seeds]
                                               for case in held_out_cases()} for name in RULES}}


class CompleteRecordingTest(AnswerFilesTest):
    """Grading refuses a recording that lacks a planned answer or holds one twice, naming them."""

    def grade(self, recorded: dict) -> tuple:
        self.result.write_text(json.dumps(recorded))
        return run_answer_check([], result_path=self.result, grades_path=self.grades)

    def test_fifty_copies_of_one_passing_answer_are_refused_not_counted(self):
        recorded = every_answer(load_model())
        recorded['answers']['notes']['held-latest'] += [recorded_answer('Mateo.', 1)] * 50
        code, out, err = self.grade(recorded)
        self.assertEqual((code, out, self.grades.exists()), (2, '', False))
        self.assertEqual(err, f'answer_check.py: {self.result}: 1 answer recorded more than once, such as notes '
                              f'held-latest seed 1 (51 times); {REDO}\n')

    def test_a_recording_missing_ninety_answers_is_refused_naming_them(self):
        recorded = every_answer(load_model())
        for name in ('relevant', 'notes', 'hybrid'):
            del recorded['answers'][name]
        code, out, err = self.grade(recorded)
        self.assertEqual((code, out, self.grades.exists()), (2, '', False))
        # A recording made before recordings carried their split, sample and cases: the advice names them all.
        self.assertEqual(err, f'answer_check.py: {self.result}: 90 answers missing, such as relevant held-latest '
                              'seed 1, relevant held-latest seed 2, relevant held-latest seed 3, relevant held-latest '
                              'seed 4, relevant held-latest seed 5; give the --rules, --cases, --split and --sample it '
                              f'was recorded with, or {REDO}\n')

    def test_a_complete_recording_is_graded(self):
        code, out, err = self.grade(every_answer(load_model()))
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(self.grades.read_text())['answers_recorded'], 120)

    def test_grading_prints_the_tables_and_the_json_only_with_format_json(self):
        code, out, err = self.grade(every_answer(load_model()))
        self.assertEqual((code, err), (0, ''))
        self.assertTrue(out.startswith('| Strategy | Pass | Fail |'), out[:80])
        self.assertTrue(out.endswith('\n  hybrid held-buried seed 5: request changed\n'), out[-80:])  # the last list
        self.assertNotIn('"graded"', out)  # the tables and lists, not the grades' JSON
        code, out, err = run_answer_check(['--format', 'json'], result_path=self.result, grades_path=self.grades)
        self.assertEqual((code, err, out), (0, '', self.grades.read_text()))


# The original's recorded prompt_tokens (issue 32's table) and this lab's counts, per rule and held-out case in
# file order; docs/counter.md explains the 16 pairs that differ by the original's other case histories.
ORIGINAL_PROMPT_TOKENS = {'recent': [62, 51, 38, 36, 84, 54], 'relevant': [62, 61, 94, 61, 37, 37],
                          'notes': [62, 96, 85, 82, 131, 120], 'hybrid': [62, 77, 94, 61, 54, 54]}
LAB_COUNTS = {'recent': [62, 52, 38, 39, 78, 56], 'relevant': [62, 58, 93, 71, 37, 37],
              'notes': [62, 97, 85, 90, 125, 127], 'hybrid': [62, 76, 93, 71, 55, 56]}
# Invented answers, one per held-out case, for every rule and seed (the original's are withheld), with the verdicts
# the original's rule gives them by hand: Mateo, object storage and 200 pass; RabbitMQ alone is the replaced decision;
# "does not say" says the fact is missing; 14 without 30 lacks a required fact.
INVENTED = {'held-latest': ('Mateo leads it.', 'pass'), 'held-old-decision': ('Object storage.', 'pass'),
            'held-correction': ('We use RabbitMQ.', 'fail'), 'held-pronoun': ('The conversation does not say.', 'fail'),
            'held-spread': ('Passwords expire after 14 days.', 'fail'),
            'held-buried': ('Allow 200 connections.', 'pass')}


class OriginalRecordingTest(AnswerFilesTest):
    """A recording in the original's format, written here: the original's model block, and answers of six fields."""

    def test_the_originals_six_fields_are_graded_as_the_original_graded_them_into_its_grades_file(self):
        answers = {name: {case: [{'seed': seed, 'answer': '' if (case, seed) == ('held-latest', 5) else text,
                                  'tool_calls': [], 'done_reason': 'stop', 'prompt_tokens': tokens, 'answer_tokens': 7}
                                 for seed in (1, 2, 3, 4, 5)]
                          for (case, (text, _)), tokens in zip(INVENTED.items(), ORIGINAL_PROMPT_TOKENS[name])}
                   for name in RULES}
        self.result.write_text(json.dumps({'model': load_model(), 'answers': answers}, indent=1))
        code, out, err = run_answer_check([], result_path=self.result, grades_path=self.grades)
        self.assertEqual((code, err), (0, ''))
        # The original's grades file: per rule the summary, then each answer's verdict; held-latest seed 5 is empty.
        summary = {'pass': 14, 'fail': 15, 'incomplete': 1, 'said_missing': 5, 'stale_as_current': 5,
                   'cases_passed_every_trial': 2}
        graded = {case: [verdict] * 5 for case, (_, verdict) in INVENTED.items()}
        graded['held-latest'][4] = 'incomplete'
        self.assertEqual(self.grades.read_text(), json.dumps({'summary': dict.fromkeys(RULES, summary),
                                                              'graded': dict.fromkeys(RULES, graded)}, indent=2) + '\n')
        # Matched by rule, case and seed, each prompt_tokens is held to today's request: 16 of 24 differ, five seeds
        # each, and the line says why (the original answered its own cases' texts), not that the model saw less.
        differ = [(name, case, seed, tokens, lab) for name in RULES for case, tokens, lab in
                  zip(INVENTED, ORIGINAL_PROMPT_TOKENS[name], LAB_COUNTS[name]) if tokens != lab
                  for seed in range(1, 6)]
        self.assertEqual(len(differ), 80)
        header, *listed = out.split("\n80 answers whose prompt_tokens differ from the lab's count (")[1].split(
            '\n')[:81]
        for why in ("the original's format names no request", "its own cases.json (sha256 30d77344...)",
                    '(docs/counter.md)):'):
            self.assertIn(why, header)
        self.assertEqual(listed, [f'  {name} {case} seed {seed}: server read {tokens} tokens, the lab counted {lab}'
                                  for name, case, seed, tokens, lab in differ])
        self.assertNotIn('did not see', out)
        self.assertTrue(out.endswith("\n120 answers name no request (the original's format): none joins fact "
                                     'recall.\n'), out[-200:])
        code, out, err = run_answer_check(['--format', 'json'], result_path=self.result, grades_path=self.grades)
        self.assertEqual((code, out, err), (0, self.grades.read_text(), ''))


class PinnedBuildTest(unittest.TestCase):
    def grade_main(self, model: dict, argv: tuple = ()):
        with tempfile.TemporaryDirectory() as folder:
            result, grades = Path(folder) / 'answer-result.json', Path(folder) / 'answer-grades.json'
            result.write_text(json.dumps(every_answer(model)))
            code, out, err = run_answer_check(list(argv), result_path=result, grades_path=grades)
            written = json.loads(grades.read_text()) if grades.exists() else None
        return code, out, err, written, result

    def test_recording_from_another_build_than_the_model_named_is_refused_not_graded(self):
        pinned, pin = load_model(), HERE / 'answer-model.json'
        for changed, model in (('ollama_digest', {**pinned, 'ollama_digest': OTHER}),
                               ('options', {**pinned, 'options': {**pinned['options'], 'temperature': 0.0}}),
                               ('quantization', {**pinned, 'quantization': 'Q8_0'})):
            with self.subTest(changed=changed):
                code, out, err, written, result = self.grade_main(model, ['--model', str(pin)])
                self.assertEqual((code, out, written), (2, '', None))
                self.assertEqual(err, f'answer_check.py: {result}: recorded with a build other than the one {pin} pins '
                                      f'({changed} differ), so its answers are not graded: leave out --model to grade '
                                      'them under the build the recording names, or record again\n')

    def test_a_recording_under_another_pin_is_graded_under_its_own_without_model(self):
        code, out, err, written, _ = self.grade_main({**load_model(), 'ollama_digest': OTHER, 'seeds': [5, 4, 3, 2, 1]})
        self.assertEqual(code, 0, err)
        self.assertEqual((written['model']['ollama_digest'], written['answers_recorded']), (OTHER, 120))

    def test_a_model_block_that_is_no_pin_is_refused_with_or_without_model(self):
        pinned = load_model()
        for changed, model, expected in (
                ('seeds', {**pinned, 'seeds': [1.0, 2, 3, 4, 5]},
                 'model: field seeds must be distinct integers, one per trial, got [1.0, 2, 3, 4, 5]'),
                ('license', {k: v for k, v in pinned.items() if k != 'license'}, "missing ['license']"),
                ('think', {**pinned, 'think': None}, 'model: field think must be false: the recording asks for '
                                                     'answers without thinking, got null')):
            for argv in ((), ('--model', str(HERE / 'answer-model.json'))):
                with self.subTest(changed=changed, argv=argv):
                    code, out, err, written, result = self.grade_main(model, argv)
                    self.assertEqual((code, out, written), (2, '', None))
                    self.assertTrue(err.startswith(f'answer_check.py: {result}: model'), err)
                    self.assertIn(expected, err)

    def test_another_server_version_with_the_pinned_build_is_graded(self):
        code, out, err, written, _ = self.grade_main({**load_model(), 'ollama_version': SERVER_VERSION})
        self.assertEqual(code, 0, err)
        self.assertEqual(written['model']['ollama_version'], SERVER_VERSION)
        self.assertEqual(written['summary']['recent']['pass'], 5)  # 'Mateo.' passes held-latest only

    def test_the_context_the_server_loaded_is_graded_not_refused(self):
        model = {**load_model(), 'ollama_version': SERVER_VERSION, 'loaded_context_length': LOADED_CONTEXT}
        code, out, err, written, _ = self.grade_main(model)
        self.assertEqual(code, 0, err)
        self.assertEqual(written['model'], model)


class ShippedFilesTest(unittest.TestCase):
    def test_pinned_build_is_the_one_the_original_recorded(self):
        self.assertEqual(load_model(), {
            'checked_on': '2026-10-20', 'publisher_model': 'google/gemma-4-E2B-it', 'license': 'Apache-2.0',
            'ollama_tag': 'gemma4:e2b', 'ollama_digest': PINNED, 'ollama_version': '0.32.14',
            'quantization': 'Q4_K_M', 'parameters': '4.6B total (E2B: about 2B effective)',
            'options': {'temperature': 1.0, 'top_k': 64, 'top_p': 0.95}, 'think': False, 'trials': 5,
            'seeds': [1, 2, 3, 4, 5]})

    def test_shipped_grades_match_a_fresh_grading(self):
        with tempfile.TemporaryDirectory() as folder:
            code, out, err = run_answer_check(['--model', str(HERE / 'answer-model.json'), '--format', 'json'],
                                              grades_path=Path(folder) / 'answer-grades.json')
        self.assertEqual((code, err), (0, ''))
        self.assertEqual(json.loads((HERE / 'answer-grades.json').read_text()), json.loads(out))

    def test_the_real_qwen_recording_grades_offline_into_its_shipped_grades_byte_for_byte(self):
        prepared_or_skip(self, 'qwen-2.5')
        with tempfile.TemporaryDirectory() as folder:
            result = Path(folder) / QWEN_RESULT.name
            shutil.copyfile(QWEN_RESULT, result)
            code, out, err = run_answer_check(['--output', str(result)])  # no server: OLLAMA_HOST is closed
            self.assertEqual((code, err), (0, ''))
            self.assertEqual(result.with_suffix('.grades.json').read_bytes(),
                             QWEN_RESULT.with_suffix('.grades.json').read_bytes())
        self.assertIn("Every answer's prompt_tokens equal the counted input tokens.", out)  # 0 count mismatches
        page = (HERE / 'docs' / 'answer-check.md').read_text(encoding='utf-8')
        self.assertIn(f'```text\n{out}```', page)  # the page's table is what grading prints

    def test_nothing_recorded_says_so_and_shows_how_to_record(self):
        with tempfile.TemporaryDirectory() as folder:
            result = Path(folder) / 'answer-result.json'
            result.write_text(json.dumps({'model': load_model(), 'answers': {}}))
            code, out, err = run_answer_check([], result_path=result, grades_path=Path(folder) / 'grades.json')
        self.assertEqual(code, 0, err)
        self.assertTrue(out.startswith('Nothing is recorded: answer-result.json holds the pinned '
                                       'model block and no answers.\n'))
        self.assertIn(f'run `{PYTHON} answer_check.py record` (120 calls)', out)


if __name__ == '__main__':
    unittest.main()
