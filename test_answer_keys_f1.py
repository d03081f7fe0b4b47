"""Tests for the answer check's second grader (answer_keys.py): LoCoMo's token F1 (`--grader f1`) and its gold
answers file.

    .venv/bin/python -m unittest -v test_answer_keys_f1.py

Every figure is worked out by hand: the stems are the examples of Porter's paper ("An algorithm for suffix
stripping", 1980), the F1 values are counted token by token in the comments, and the grading run goes through the
real client against the fake Ollama server of test_support.py on 127.0.0.1. Every file a test writes goes to a
temporary directory.
"""
import json
import os
import unittest
from unittest import mock

from answer_keys import f1, load_gold_answers, tokens
from answer_model import load_model
from test_support import FakeOllama, only_loopback as setUpModule, reply
from test_support_fixtures import AnswerFilesTest, Rejecting
from test_support_runs import run_answer_check


BUDGET = {'context_limit': 384, 'max_new_tokens': 96, 'margin': 32}
# Two converted LoCoMo-like questions, their gold answers, and what the fake model answers to each.
CASES = [{'id': 'conv-1-q0', 'split': 'held_out', 'kind': 'multi-hop', 'instructions': 'Answer from it.',
          'current': 'What is Caroline looking into?', 'budget': BUDGET,
          'history': [{'user': 'I am researching adoption agencies.', 'assistant': 'And counseling, too?'}],
          'required': ['I am researching adoption agencies.'], 'stale': []},
         {'id': 'conv-1-q1', 'split': 'held_out', 'kind': 'open-domain', 'instructions': 'Answer from it.',
          'current': 'Would Caroline pursue writing?', 'budget': BUDGET,
          'history': [{'user': 'I want to be a counselor.', 'assistant': 'Not a writer, then.'}],
          'required': ['I want to be a counselor.'], 'stale': []}]
GOLD = {'answers': {'conv-1-q0': 'Adoption agencies, counseling',
                    'conv-1-q1': 'Likely no; she wants to be a counselor'}}
SAID = {'What is Caroline looking into?': 'adoption agencies, and counseling for kids',
        'Would Caroline pursue writing?': 'Likely no.'}


class NormalisationTest(AnswerFilesTest):
    def test_words_are_porter_stemmed_as_in_porters_paper(self):
        self.assertEqual(tokens('caresses ponies ties cats motoring hopping'),
                         ['caress', 'poni', 'ti', 'cat', 'motor', 'hop'])

    def test_commas_punctuation_articles_and_and_go_and_case_does_not_count(self):
        self.assertEqual(tokens('The Cats, and a dog!'), ['cat', 'dog'])
        self.assertEqual(tokens('an Adoption-Agency.'), tokens('adoptionagency'))  # punctuation joins, as LoCoMo's
        for answer, gold in (('7 May, 2023', '7 May 2023'), ('Sweden and Norway', 'Sweden, Norway'),
                             ('an adoption agency.', 'Adoption agency')):
            with self.subTest(answer=answer):
                self.assertEqual(f1(answer, gold, 'single-hop'), 1.0)


class ScoreTest(AnswerFilesTest):
    def test_a_partial_answer_scores_by_the_tokens_it_shares(self):
        # psycholog counsel | psycholog counsel certif: 2 shared, precision 2/2, recall 2/3, F1 0.8
        self.assertEqual(f1('Psychology and counseling', 'Psychology, counseling certification', 'single-hop'), 0.8)
        self.assertEqual(f1('She went yesterday', '7 May 2023', 'temporal'), 0.0)
        self.assertEqual(f1('', '7 May 2023', 'temporal'), 0.0)

    def test_multi_hop_averages_the_best_match_of_each_part_of_the_gold_answer(self):
        # gold 'adoption agencies' meets the first part whole: 1; gold 'counseling' meets 'counseling for kids':
        # 1 shared of 3 said, precision 1/3, recall 1, F1 0.5; the mean of 1 and 0.5 is 0.75.
        self.assertEqual(f1('adoption agencies, and counseling for kids', 'Adoption agencies, counseling',
                            'multi-hop'), 0.75)
        # 'counseling for kids and teens' against 'counseling': precision 1/4, recall 1, F1 0.4; the mean of 1 and
        # 0.4 is 0.7. Another kind takes it whole: 6 said, 3 wanted, 3 shared: precision 1/2, recall 1, F1 2/3.
        said = 'adoption agencies, counseling for kids and teens'
        self.assertAlmostEqual(f1(said, 'Adoption agencies, counseling', 'multi-hop'), 0.7)
        self.assertAlmostEqual(f1(said, 'Adoption agencies, counseling', 'single-hop'), 2 / 3)

    def test_open_domain_is_scored_against_the_gold_text_before_its_first_semicolon(self):
        # 'likely no' against 'no': 1 shared, precision 1, recall 1/2, F1 2/3; whole gold (7 tokens): F1 1/4.
        self.assertAlmostEqual(f1('No', 'Likely no; she wants to be a counselor', 'open-domain'), 2 / 3)
        self.assertEqual(f1('No', 'Likely no; she wants to be a counselor', 'single-hop'), 0.25)


class GoldFileTest(Rejecting):
    def test_a_gold_file_must_answer_every_chosen_case_with_text_and_no_other(self):
        for data, expected in (({'conv-1-q0': 'x'}, 'expected {"answers": {case_id: "gold answer"}}'),
                               ({'answers': {'conv-1-q0': 2022, 'conv-1-q1': 'x'}}, 'expected {"answers"'),
                               ({'answers': {'conv-1-q0': 'x'}}, "none for 1 ['conv-1-q1'], 0 for no case []"),
                               ({'answers': {**GOLD['answers'], 'conv-9-q9': 'x'}}, "1 for no case ['conv-9-q9']")):
            with self.subTest(data=data):
                self.assertIn(expected, self.rejection(lambda path: load_gold_answers(path, CASES, CASES), 'gold.json',
                                                       data))


BARE = """
def bare(case, count):
    return [{'role': 'system', 'content': case['instructions']}, {'role': 'user', 'content': case['current']}]


RULES = {'bare': bare}
"""


class GraderTest(AnswerFilesTest):
    def test_record_then_grade_by_f1_gives_four_ways_with_counts_per_rule_and_kind_at_a_stated_threshold(self):
        for name, data in (('cases.json', CASES), ('gold.json', GOLD), ('bare.py', BARE),
                           ('one-seed.json', {**load_model(), 'seeds': [1], 'trials': 1})):
            (self.folder / name).write_text(data if isinstance(data, str) else json.dumps(data))
        options = ['--cases', str(self.folder / 'cases.json'), '--grader', 'f1', '--keys',
                   str(self.folder / 'gold.json'), '--rules', str(self.folder / 'bare.py')]
        with FakeOllama(chat=lambda body, n: (200, reply(SAID[body['messages'][-1]['content']]))) as fake, \
                mock.patch.dict(os.environ, {'OLLAMA_HOST': fake.host}):
            code, out, err = run_answer_check(['record', '--model', str(self.folder / 'one-seed.json'), *options],
                                              result_path=self.result, grades_path=self.grades)
        self.assertEqual((code, len(fake.chats())), (0, 10), err)
        grades = json.loads(self.grades.read_text())
        # 0.75 (worked out above) and 1.0 ('likely no' is the gold text before its ';'): a mean of 0.875, both at
        # 0.5 or more. The whole history fits each request of the four, so their answers had every required fact;
        # bare sends none of it, so its same answers are right with the facts missing.
        one, two, none = {'answers': 1}, {'answers': 2, 'mean_f1': 0.875}, {'answers': 0, 'mean_f1': None}
        self.assertEqual((grades['f1_threshold'], grades['f1']['recent']), (0.5, {
            'all': two, 'right_every_fact': two, 'right_fact_missing': none, 'wrong_every_fact': none,
            'wrong_fact_missing': none, 'by_kind': {'multi-hop': {**one, 'mean_f1': 0.75},
                                                    'open-domain': {**one, 'mean_f1': 1.0}}}))
        self.assertEqual((grades['f1']['bare']['right_fact_missing'], grades['f1']['bare']['right_every_fact']),
                         (two, none))
        self.assertEqual(grades['graded']['recent'], {'conv-1-q0': [{'seed': 1, 'f1': 0.75}],
                                                      'conv-1-q1': [{'seed': 1, 'f1': 1.0}]})
        self.assertEqual(out.splitlines()[:4], [
            'Right: an F1 of 0.5 or more (--f1-threshold). Each cell: answers: their mean F1; the four ways leave out '
            'answers to requests no longer sent.',
            '| Rule | All | Right, every fact in the request | Right, a fact missing | Wrong, every fact in the '
            'request | Wrong, a fact missing | multi-hop | open-domain |',
            '|---|---|---|---|---|---|---|---|',
            '| recent | 2: 0.875 | 2: 0.875 | 0 | 0 | 0 | 1: 0.750 | 1: 1.000 |'])
        self.assertIn('\n| bare | 2: 0.875 | 0 | 2: 0.875 | 0 | 0 | 1: 0.750 | 1: 1.000 |\n', out)
        # Offline again, the recording carrying its pin, at another threshold: the 0.75 answer is now wrong.
        code, out, err = run_answer_check([*options, '--f1-threshold', '0.8'], result_path=self.result,
                                          grades_path=self.grades)
        self.assertEqual(code, 0, err)
        regraded = json.loads(self.grades.read_text())
        self.assertEqual((regraded['f1_threshold'], regraded['f1']['recent']['right_every_fact'],
                          regraded['f1']['recent']['wrong_every_fact'], regraded['graded'], regraded['model']),
                         (0.8, {**one, 'mean_f1': 1.0}, {**one, 'mean_f1': 0.75}, grades['graded'], grades['model']))
        self.assertTrue(out.startswith('Right: an F1 of 0.8 or more (--f1-threshold).'), out)


if __name__ == '__main__':
    unittest.main()
