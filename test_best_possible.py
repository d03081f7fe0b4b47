"""Tests for the best possible selection: the exact search, its rows and its summary.

    .venv/bin/python -m unittest -v test_best_possible.py

The search is checked against brute force written here: every subset of every
history, each request built in full, counted whole by a plain count function
(render, encode, len: never a sum of turn costs) and graded by the report's
grader. Each test is named after the failure it pins. Nothing is written to disk.
"""
import copy
import itertools
import random
import unittest

from best_possible import MAX_CANDIDATES, best_row, search, turn_facts
from scorer import facts_in, graded_row, totals
from shapes import build_request, turn_messages
from test_support_fixtures import shipped_cases, whole_count
from tokenizer import counter


def allowance(case: dict) -> int:
    """The README's input allowance, written out here."""
    budget = case['budget']
    return budget['context_limit'] - budget['max_new_tokens'] - budget['margin']


def brute_force(case: dict) -> tuple:
    """(turns, input_tokens, found, missing) of the best selection over every subset of the history."""
    best = None
    for size in range(len(case['history']) + 1):
        for turns in itertools.combinations(range(len(case['history'])), size):
            request = build_request(case, list(turns))
            tokens = whole_count(request)
            row = graded_row(case, {'messages': request, 'turns': list(turns), 'notes': 0, 'input_tokens': tokens})
            if tokens > allowance(case) or row['stale_included']:
                continue
            key = (-row['required_found'], tokens, turns)
            if best is None or key < best[0]:
                best = key, row
    key, row = best
    return list(key[2]), key[1], row['required_found'], row['missing']


def brute_force_search(candidates: dict, room: int) -> list[int]:
    best = None
    for size in range(len(candidates) + 1):
        for turns in itertools.combinations(sorted(candidates), size):
            cost = sum(candidates[index][0] for index in turns)
            facts = frozenset().union(*(candidates[index][1] for index in turns))
            if cost <= room and (best is None or (-len(facts), cost, turns) < best):
                best = (-len(facts), cost, turns)
    return list(best[2])


class SearchTest(unittest.TestCase):
    def test_search_prefers_most_facts_then_fewest_tokens_then_earliest_turns(self):
        a, b = frozenset({'a'}), frozenset({'b'})
        self.assertEqual(search({0: (14, a), 1: (30, b), 2: (9, a)}, 40), [1, 2])  # both facts beat fewer tokens
        self.assertEqual(search({0: (14, a), 2: (9, a)}, 40), [2])  # one fact: the cheaper turn
        self.assertEqual(search({3: (9, a), 5: (9, a)}, 40), [3])  # a full tie: the earlier turn
        self.assertEqual(search({0: (50, a)}, 40), [])  # nothing fits
        self.assertEqual(search({}, 40), [])

    def test_search_equals_brute_force_on_seeded_random_candidates(self):
        rng = random.Random(20261130)
        for _ in range(2000):
            candidates = {index * rng.randint(1, 3): (rng.randint(1, 30), frozenset(rng.sample('abcde', rng.randint(1, 3))))
                          for index in range(rng.randint(0, 9))}
            room = rng.randint(0, 100)
            self.assertEqual(search(candidates, room), brute_force_search(candidates, room), (candidates, room))

    def test_search_refuses_more_candidates_than_it_can_search_exactly(self):
        with self.assertRaises(ValueError):
            search({index: (1, frozenset({index})) for index in range(MAX_CANDIDATES + 1)}, 100)

    def test_twenty_candidates_of_one_shared_fact_are_searched_quickly(self):
        # Without the cost cut every one of the 2**20 subsets fits and would be visited.
        self.assertEqual(search({index: (5, frozenset({'a'})) for index in range(MAX_CANDIDATES)}, 1000), [0])


class BestRowTest(unittest.TestCase):
    def test_every_case_row_equals_brute_force_over_all_subsets_of_turns(self):
        for case_id, case in shipped_cases().items():
            with self.subTest(case=case_id):
                row = best_row(case, counter())
                self.assertEqual((row['turns'], row['input_tokens'], row['required_found'], row['missing']),
                                 brute_force(case))
                self.assertEqual((row['stale_included'], row['not_searched']), ([], None))

    def test_shipped_rows_find_every_fact_but_the_one_inside_a_turn_too_long_to_send(self):
        rows = {case_id: best_row(case, counter()) for case_id, case in shipped_cases().items()}
        self.assertEqual({case_id: row['turns'] for case_id, row in rows.items()}, {
            'dev-latest': [1], 'dev-old-decision': [0], 'dev-correction': [1], 'dev-pronoun': [1],
            'dev-spread': [0, 2], 'dev-no-overlap': [0], 'held-latest': [1], 'held-old-decision': [0],
            'held-correction': [1], 'held-pronoun': [1], 'held-spread': [0, 2], 'held-buried': []})
        self.assertEqual(rows['held-buried']['missing'], ['gateway must allow 200 connections'])
        self.assertEqual((rows['dev-correction']['fact_turns'], rows['dev-correction']['stale_turns']), ([1], [0]))

    def test_the_only_fact_turn_is_not_taken_when_it_also_holds_a_stale_fact(self):
        case = copy.deepcopy(shipped_cases()['dev-correction'])
        case['history'][1]['assistant'] = 'Switched to PostgreSQL. We will use MySQL nowhere.'
        row = best_row(case, counter())
        self.assertEqual((row['fact_turns'], row['stale_turns']), ([1], [0, 1]))
        self.assertEqual((row['turns'], row['required_found'], row['stale_included']), ([], 0, []))
        self.assertEqual(row['input_tokens'], 35)  # dev-correction's bare request, a reference figure
        self.assertEqual((row['turns'], row['input_tokens'], row['required_found'], row['missing']),
                         brute_force(case))

    def test_a_case_where_no_fact_turn_fits_gets_the_bare_request(self):
        case = copy.deepcopy(shipped_cases()['dev-old-decision'])
        bare = whole_count(build_request(case, []))
        with_fact = whole_count(build_request(case, [0]))
        case['budget'] = {'context_limit': with_fact - 1 + 96 + 32, 'max_new_tokens': 96, 'margin': 32}
        row = best_row(case, counter())
        self.assertEqual((row['turns'], row['input_tokens'], row['required_found'], row['missing']),
                         ([], bare, 0, ['We chose PostgreSQL for the application.']))
        self.assertEqual((row['turns'], row['input_tokens'], row['required_found'], row['missing']),
                         brute_force(case))

    def test_a_fact_the_question_already_carries_makes_no_turn_worth_its_tokens(self):
        case = copy.deepcopy(shipped_cases()['dev-latest'])
        case['current'] = 'The release freeze starts on Thursday at noon. Is that still right?'
        row = best_row(case, counter())
        self.assertEqual((row['fact_turns'], row['turns'], row['required_found']), ([1], [], 1))

    def test_more_candidate_turns_than_the_search_allows_are_reported_not_guessed(self):
        facts = [f'Rule {n} is fixed.' for n in range(MAX_CANDIDATES + 1)]
        case = dict(copy.deepcopy(shipped_cases()['dev-latest']), required=facts,
                    history=[{'user': fact, 'assistant': 'Noted.'} for fact in facts])
        row = best_row(case, counter())
        self.assertEqual(row['not_searched'], '21 fact-holding turns without a stale fact; the exact search stops at 20')
        self.assertEqual((row['turns'], row['input_tokens'], row['required_found'], row['missing']),
                         (None, None, None, None))
        self.assertEqual((row['required_total'], row['fact_turns']), (21, list(range(21))))

    def test_a_long_historys_fact_turns_are_the_turns_whose_messages_alone_hold_each_fact(self):
        # The shape of a LoCoMo case: 300 short turns, 4 of them evidence; the stale 'Reply 29' is in turns 29 and
        # 290 to 299, so the search leaves out turn 290 and its fact.
        history = [{'user': f'Message {n} about the weekend.', 'assistant': f'Reply {n}.'} for n in range(300)]
        facts = ['Message 17 about', 'Message 150 about', 'Message 290 about', 'Reply 3.']
        case = dict(copy.deepcopy(shipped_cases()['dev-latest']), history=history, required=facts,
                    stale=['Reply 29'])
        row = best_row(case, counter())
        self.assertEqual((row['turns'], row['required_found'], row['fact_turns'], row['stale_turns']),
                         ([3, 17, 150], 3, [3, 17, 150, 290], [29, *range(290, 300)]))
        by_hand = [{fact for fact in case[kind] if facts_in(case, turn_messages(turn))[kind == 'stale'].count(fact)}
                   for turn in history for kind in ('required', 'stale')]
        self.assertEqual([set(facts.get(index, ())) for index in range(300) for facts in turn_facts(case)], by_hand)


class SummaryTest(unittest.TestCase):
    def test_summary_counts_the_facts_of_unsearched_rows_as_not_found(self):
        rows = [{'turns': [0], 'input_tokens': 40, 'required_found': 1, 'required_total': 1, 'missing': [],
                 'stale_included': []},
                {'turns': [], 'input_tokens': 51, 'required_found': 0, 'required_total': 2, 'missing': ['a', 'b'],
                 'stale_included': []},
                {'turns': None, 'input_tokens': None, 'required_found': None, 'required_total': 3, 'missing': None,
                 'stale_included': None}]
        # The strategies' rows of these cases hold 6 facts in all, so the best possible total must too.
        self.assertEqual(totals(rows), {'cases': 3, 'not_searched': 1, 'facts_found': 1, 'facts_total': 6,
                                           'complete_cases': 1, 'cases_with_stale_facts': 0,
                                           'mean_input_tokens': 45.5})
        self.assertIsNone(totals(rows[2:])['mean_input_tokens'])


if __name__ == '__main__':
    unittest.main()
