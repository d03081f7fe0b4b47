"""Tests for field_rules.py: BM25, dense and fused retrieval as rules, on conversations written for the test.

    .venv/bin/python -m unittest -v test_field_rules.py

Each test is named after the failure it pins. BM25 scores are worked out by
hand from the Lucene formula bm25s uses; fusion orders from the RRF sum. No
test downloads anything: one runs the rules with every socket refused.
"""
import math
import os
from pathlib import Path
import subprocess
import sys
import tempfile
import unittest

from case_set import load_cases
from scorer import graded_row
from evaluate import report
import field_rules
from field_rules import RRF_K, bm25_index, bm25_ranked, bm25_words, dense_ranked, fuse, keep_in_order
from shapes import build_request, turn_texts
from test_support_fixtures import HERE, whole_count
from tokenizer import counter
from views import report_table


# Four turns of three indexed words each (after stemming and stop words): `weather` in two, `ferret` in one.
WEATHER = (('weather sunny', 'noted'), ('ferret zeta', 'noted'), ('weather rainy', 'noted'), ('lunch pasta', 'noted'))
# A near-synonym question for turn 1 (car / vehicle, bought / purchase) and two unrelated turns.
PURCHASES = (('The stock market fell today.', 'Oh no.'), ('I bought a new car yesterday.', 'Nice.'),
             ('My favourite food is spaghetti.', 'Yum.'))


def lucene_bm25(tf: int, df: int, documents: int, length: int, mean_length: float,
                k1: float = 1.5, b: float = 0.75) -> float:
    """One term's BM25 score as Lucene (and bm25s's default) defines it, written out for the test."""
    idf = math.log(1 + (documents - df + 0.5) / (df + 0.5))
    return idf * tf / (tf + k1 * (1 - b + b * length / mean_length))


def case_of(turns, question: str, context_limit: int = 4096) -> dict:
    return {'id': 'test', 'split': 'dev', 'kind': 'test', 'instructions': 'Answer from the conversation.',
            'current': question, 'history': [{'user': user, 'assistant': assistant} for user, assistant in turns],
            'budget': {'context_limit': context_limit, 'max_new_tokens': 0, 'margin': 0}}


class Bm25Test(unittest.TestCase):
    def test_question_words_are_stemmed_and_stop_words_dropped(self):
        self.assertEqual(bm25_words(['The ferrets and the weather?']), [['ferret', 'weather']])

    def test_scores_are_lucenes_bm25_worked_out_by_hand(self):
        scores = bm25_index(WEATHER).get_scores(['weather', 'ferret']).tolist()
        common, rare = lucene_bm25(1, 2, 4, 3, 3.0), lucene_bm25(1, 1, 4, 3, 3.0)
        self.assertAlmostEqual(common, math.log(2) / 2.5)
        for got, expected in zip(scores, [common, rare, common, 0.0]):
            self.assertAlmostEqual(got, expected, places=6)

    def test_a_rare_word_beats_a_common_one_ties_go_to_the_newer_turn_and_unscored_turns_are_left_out(self):
        self.assertEqual(bm25_ranked(WEATHER, 'The ferrets and the weather?'), [1, 2, 0])

    def test_a_question_of_stop_words_or_unknown_words_ranks_nothing(self):
        self.assertEqual(bm25_ranked(WEATHER, 'What is it?'), [])
        self.assertEqual(bm25_ranked(WEATHER, 'zebras'), [])
        self.assertEqual(bm25_ranked((('the', 'a'),), 'weather'), [])  # nothing to index at all

    def test_cases_of_one_conversation_build_one_index_even_as_separate_copies(self):
        turns = (('alpha beta', 'gamma'), ('delta', 'epsilon unique-to-this-test'))
        before = bm25_index.cache_info().misses
        for question in ('alpha?', 'delta?', 'epsilon?'):
            field_rules.RULES['bm25'](case_of(turns, question), counter())  # a new list, same text
        self.assertEqual(bm25_index.cache_info().misses - before, 1)


class DenseTest(unittest.TestCase):
    def test_a_near_synonym_beats_unrelated_turns(self):
        self.assertEqual(dense_ranked(PURCHASES, 'What vehicle did I purchase?')[0], 1)
        self.assertEqual(dense_ranked(PURCHASES, 'Which pasta dish do I like?')[0], 2)

    def test_every_turn_is_ranked(self):
        self.assertEqual(sorted(dense_ranked(PURCHASES, 'Anything?')), [0, 1, 2])
        self.assertEqual(dense_ranked((), 'Anything?'), [])

    def test_the_model_is_the_bundled_256_dimension_one(self):
        self.assertEqual(field_rules.turn_vectors(PURCHASES).shape, (3, 256))


class FusionTest(unittest.TestCase):
    def test_fusion_order_worked_out_by_hand(self):
        # turn 1: 1/62 + 1/61; turn 3: 1/61; turn 2: 1/62.
        self.assertEqual(fuse([[3, 1], [1, 2]], k=60), [1, 3, 2])
        # k = 1 lets one first place beat two second places: turn 5: 1/2 = 0.5; turn 4: 1/3 + 1/3 = 0.667.
        self.assertEqual(fuse([[5, 4], [4]], k=1), [4, 5])
        self.assertEqual(fuse([[5, 4], [6, 4]], k=60), [4, 6, 5])  # 5 and 6 both 1/61: the newer first

    def test_a_turn_only_one_ranking_holds_gets_only_that_sides_share(self):
        self.assertEqual(fuse([[], [2, 0]]), [2, 0])
        self.assertEqual(RRF_K, 60)


def reference_keep_in_order(case: dict, order: list[int]) -> list[int]:
    """As the README states `relevant`'s fitting: try each turn in order, keep it if the whole request with it
    still fits the allowance, skip it and try the next if not."""
    budget = case['budget']
    room = budget['context_limit'] - budget['max_new_tokens'] - budget['margin']
    kept = []
    for index in order:
        if whole_count(build_request(case, kept + [index])) <= room:
            kept.append(index)
    return sorted(kept)


class RequestTest(unittest.TestCase):
    def test_passing_over_turns_that_cannot_fit_keeps_what_trying_each_whole_request_keeps(self):
        for case in load_cases(HERE / 'cases.json'):
            order = dense_ranked(tuple(map(turn_texts, case['history'])), case['current'])
            for limit in range(100, 700, 7):
                sized = {**case, 'budget': {'context_limit': limit, 'max_new_tokens': 0, 'margin': 0}}
                kept = reference_keep_in_order(sized, order)
                expected = {'messages': build_request(sized, kept), 'turns': kept, 'notes': 0,
                            'input_tokens': whole_count(build_request(sized, kept))}
                for label, count in (('the lab counter', counter()), ('a plain count function', whole_count)):
                    with self.subTest(case=case['id'], limit=limit, count=label):
                        self.assertEqual(keep_in_order(sized, count, dense_ranked), expected)

    def test_a_turn_that_does_not_fit_is_skipped_and_the_next_tried(self):
        long_turn = ('ferret ' + 'word ' * 300, 'noted')
        turns = (('ferret zeta', 'noted'), long_turn, ('weather ferret', 'noted'))
        case = case_of(turns, 'ferret?', context_limit=200)
        selected = field_rules.RULES['bm25'](case, counter())
        self.assertEqual(selected['turns'], [0, 2])
        self.assertLessEqual(selected['input_tokens'], 200)

    def test_the_rules_process_changes_no_row_of_the_field_rules(self):
        # Run as a rules file, in a process of its own with the lab's counter asked through a pipe, each rule
        # must give the rows it gives when called in this process.
        cases = load_cases(HERE / 'cases.json')
        rows = report(HERE / 'cases.json', [HERE / 'field_rules.py'])['cases']
        for name, rule in field_rules.RULES.items():
            self.assertEqual(rows[name], [graded_row(case, rule(case, counter())) for case in cases])

    def test_the_readme_shows_the_field_rules_rows_of_the_twelve_cases(self):
        printed = report_table(report(HERE / 'cases.json', [HERE / 'field_rules.py'])).splitlines()
        field_rows = [line for line in printed if line.split(' | ')[0] in ('| bm25', '| dense', '| fused')]
        self.assertEqual(len(field_rows), 6)
        readme = (HERE / 'README.md').read_text(encoding='utf-8')
        self.assertIn('\n'.join([*printed[:2], *field_rows]) + '\n', readme)


NO_NETWORK = '''
import socket, sys
class Refused(socket.socket):
    def __init__(self, *args, **kwargs):
        raise AssertionError('a socket was opened')
socket.socket = Refused
socket.create_connection = lambda *args, **kwargs: (_ for _ in ()).throw(AssertionError('a connection was made'))
import requests
def refuse(*args, **kwargs):
    raise AssertionError('requests was called')
requests.Session.request = refuse
import field_rules
from tokenizer import counter
case = {'id': 't', 'split': 'dev', 'kind': 't', 'instructions': 'Answer.', 'current': 'What vehicle did I purchase?',
        'history': [{'user': 'I bought a new car.', 'assistant': 'Nice.'}, {'user': 'Lunch was pasta.', 'assistant': 'Yum.'}],
        'budget': {'context_limit': 4096, 'max_new_tokens': 0, 'margin': 0}}
print([field_rules.RULES[name](case, counter())['turns'] for name in ('bm25', 'dense', 'fused')])
'''


class OfflineTest(unittest.TestCase):
    def test_the_rules_load_their_model_without_any_network_or_cache_folder(self):
        with tempfile.TemporaryDirectory() as folder:
            nowhere = Path(folder, 'absent')
            environment = {**os.environ, 'HOME': str(nowhere), 'XDG_CACHE_HOME': str(nowhere / 'cache'),
                           'HF_HOME': str(nowhere / 'hf'), 'HF_HUB_OFFLINE': '1'}
            result = subprocess.run([sys.executable, '-c', NO_NETWORK], cwd=HERE, capture_output=True, text=True,
                                    timeout=300, env=environment)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(result.stdout, '[[], [0, 1], [0, 1]]\n')  # no shared word: bm25 keeps nothing
            self.assertNotIn('Falling back', result.stderr)
            self.assertFalse(nowhere.exists())


class LoggingTest(unittest.TestCase):
    def test_importing_the_rules_sets_up_no_logging_that_prints_every_librarys_info_lines(self):
        # wordllama's import calls logging.basicConfig(level=INFO): left alone, any library's info line
        # reaches stderr.
        code = ("import logging, field_rules; logging.getLogger('lib').info('a line'); "
                'print(logging.root.handlers, logging.getLevelName(logging.root.level))')
        result = subprocess.run([sys.executable, '-c', code], cwd=HERE, capture_output=True, text=True,
                                timeout=300)
        self.assertEqual((result.stdout, result.stderr), ('[] WARNING\n', ''))


if __name__ == '__main__':
    unittest.main()
