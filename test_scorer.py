"""Tests for scorer.py: which facts reach a request, what rows add up to, and the allowance they are graded by.

    .venv/bin/python -m unittest -v test_scorer   (under a second)

Each test is named after the grade or figure that would be wrong; expected figures are worked out by hand.
"""
from itertools import combinations
import re
import unittest
from unittest import mock

from prepared_folder import DEFAULT
import scorer
from scorer import (POINT_TOTALS, by_group, facts_in, graded_row, holders, memory_row, memory_totals, request_facts,
                    totals)
from shapes import allowance, build_request, message_text
from test_support_fixtures import calling, read, result, said, user
from test_support_oracle import TOOL_FAMILIES, official, template_path
import tokenizer
from tool_formats import as_rendered

CASE = {'id': 'c', 'split': 'dev', 'kind': 'k', 'required': ['a < b', 'Use PostgreSQL'], 'stale': ['use MySQL'],
        'budget': {'context_limit': 40, 'max_new_tokens': 4, 'margin': 2}}
QUESTION = {'id': 'q', 'user': 'ana', 'split': 'dev', 'kind': 'k', 'question': 'Where do I live?',
            'required': ['Ana lives in Porto'], 'stale': ['Ana lives in Lyon'], 'forgotten': ['555-0142'],
            'facts_quota': 40, 'budget': {'context_limit': 512, 'max_new_tokens': 96, 'margin': 32}}


def messages(*texts: str) -> list[dict]:
    return [{'role': 'user', 'content': text} for text in texts]


class FactsTest(unittest.TestCase):
    def test_a_fact_counts_raw_or_as_the_notes_block_quotes_it_and_never_across_two_messages(self):
        self.assertEqual(facts_in(CASE, messages('- note: a &lt; b', 'We will use MySQL.')), (['a < b'], ['use MySQL']))
        self.assertEqual(facts_in(CASE, messages('Use Postgre', 'SQL')), ([], []))

    def test_a_row_says_what_was_missing_and_whether_the_request_fit(self):
        chosen = {'messages': messages('Use PostgreSQL now'), 'turns': [1], 'notes': 0, 'input_tokens': 35}
        self.assertEqual(graded_row(CASE, chosen), {
            'case': 'c', 'split': 'dev', 'kind': 'k', 'turns': [1], 'notes': 0, 'input_tokens': 35,
            'within_budget': False, 'required_found': 1, 'required_total': 2, 'missing': ['a < b'],
            'stale_included': []})


BESIDE = {'role': 'assistant', 'content': 'Deploy from release-7.', 'tool_calls': [read('c1', 'deploy.ini')]}
AGENT = [{'role': 'system', 'content': 'Use the tools.'}, user('Check the deploy.'), BESIDE, result('c1', 'ok'),
         said('Done.'), user('Which branch?')]


class RenderedTest(unittest.TestCase):
    """Only what the chosen counter's template writes is graded: Llama 3's drops an assistant's text beside a call."""

    def graded_under(self, name: str) -> int:
        tokenizer.choose_counter(name)
        self.addCleanup(tokenizer.choose_counter, DEFAULT)
        case = {**CASE, 'required': ['Deploy from release-7.'], 'stale': [], 'tools': []}
        return graded_row(case, {'messages': AGENT, 'turns': [0], 'notes': 0, 'input_tokens': 30})['required_found']

    def test_a_fact_beside_a_call_is_found_where_the_template_writes_it_and_not_under_llama(self):
        self.assertEqual({name: self.graded_under(name) for name in ('gemma-4-e2b', 'qwen-2.5', 'llama-3.1',
                                                                      'llama-3.3')},
                         {'gemma-4-e2b': 1, 'qwen-2.5': 1, 'llama-3.1': 0, 'llama-3.3': 0})

    def test_each_part_the_view_keeps_is_in_the_official_render_and_each_part_it_drops_is_not(self):
        """Every text of every message holds a word of its own; the official template is the oracle."""
        request = [{'role': 'system', 'content': 'w0'}, user('w1'), {**calling(read('c1', 'w2')), 'content': 'w3'},
                   result('c1', 'w4'), said('w5'), user('w6'), calling(read('c2', 'w7')), result('c2', 'w8'),
                   user('w9')]
        tools = [{'type': 'function', 'function': {'name': 'read_file', 'description': 'Read.', 'parameters': {}}}]
        checked = [name for name in TOOL_FAMILIES if template_path(name) is not None]
        for name, listed in ((name, listed) for name in checked for listed in (None, tools)):
            prompt, view = official(name, request, listed), as_rendered(name, request)
            for message, kept in zip(request, view):
                for word in re.findall(r'\bw\d\b', message_text(message)):
                    self.assertEqual(word in message_text(kept), word in prompt, (name, word))
        if not checked:
            self.skipTest('no official template with tools is at hand')


# Facts inside a turn, its escaped form, a NUL, one turn repeated, and one running from a turn into the next.
HISTORY = [{'user': 'Keep a < b.', 'assistant': 'ok'}, {'user': 'x &lt; y', 'assistant': 'Use\0it'},
           {'user': 'Keep a < b.', 'assistant': 'ok'}, {'user': 'end of', 'assistant': 'line'}]
TURN_CASE = dict(CASE, history=HISTORY, instructions='Answer.', current='What?',
                 required=['a < b', 'x < y', 'Use\0it', 'ok\nend'], stale=['line\nWhat'])


class TurnFactsTest(unittest.TestCase):
    def test_a_facts_turns_are_those_whose_messages_alone_hold_it_raw_or_escaped(self):
        self.assertEqual([holders(HISTORY, fact) for fact in ('a < b', 'x < y', 'Use\0it', 'ok\nend', 'of\nline')],
                         [{0, 2}, {1}, {1}, set(), {3}])

    def test_facts_read_from_whole_turns_are_the_facts_the_whole_request_holds(self):
        for kept in (kept for size in range(5) for kept in combinations(range(4), size)):
            for notes in ([], ['- [turn 1, user] Keep a &lt; b.']):
                for case in (TURN_CASE, dict(TURN_CASE, required=['a < b', 'x < y', 'Use\0it'], stale=['ok']),
                             dict(TURN_CASE, required=['x < y'])):
                    chosen = {'messages': build_request(case, kept, notes), 'turns': list(kept)}
                    self.assertEqual(request_facts(case, chosen), facts_in(case, chosen['messages']), (kept, notes))

    def test_a_request_that_is_not_its_turns_is_graded_by_its_messages(self):
        request = build_request(TURN_CASE, [1])
        for messages in (request[:1] + request[3:], [request[0], {**request[1], 'content': 'a < b'}, *request[2:]],
                         [request[0], {**request[1], 'name': 'a < b'}, *request[2:]]):  # a message of more than two keys
            self.assertEqual(request_facts(TURN_CASE, {'messages': messages, 'turns': [1]}),
                             facts_in(TURN_CASE, messages))
        self.assertEqual(request_facts(TURN_CASE, {'messages': request[:1] + request[3:], 'turns': [1]}), ([], []))

    def test_each_fact_is_searched_once_per_conversation_not_once_per_question(self):
        history = [dict(turn) for turn in HISTORY]  # a list of its own: no other test has searched it
        with mock.patch.object(scorer, 'places', wraps=scorer.places) as search:
            for kept in ([0], [1, 2], [3]):
                request_facts(dict(TURN_CASE, history=history, required=['a < b'], stale=[]),
                              {'messages': build_request(dict(TURN_CASE, history=history), kept), 'turns': kept})
        self.assertEqual(search.call_count, 2)  # 'a < b' and 'a &lt; b', once


class TotalsTest(unittest.TestCase):
    ROWS = [{'case': 'a', 'split': 'held_out', 'kind': 'temporal', 'turns': [0], 'input_tokens': 40,
             'within_budget': True, 'required_found': 1, 'required_total': 1, 'missing': [], 'stale_included': []},
            {'case': 'b', 'split': 'dev', 'kind': 'multi-hop', 'turns': [], 'input_tokens': 51, 'within_budget': False,
             'required_found': 0, 'required_total': 2, 'missing': ['x', 'y'], 'stale_included': ['old']}]

    def test_a_summary_worked_out_by_hand(self):
        self.assertEqual(totals(self.ROWS), {
            'cases': 2, 'facts_found': 1, 'facts_total': 3, 'fact_recall': 0.333, 'complete_cases': 1,
            'cases_with_stale_facts': 1, 'over_budget': 1, 'mean_input_tokens': 45.5})

    def test_a_group_mixing_pair_and_agent_rows_counts_its_invalid_requests_whatever_row_comes_first(self):
        agent = {**self.ROWS[0], 'case': 'g', 'invalid': 'the system message is not first', 'required_found': 0,
                 'missing': ['f']}
        for rows in ([self.ROWS[0], agent], [agent, self.ROWS[0]]):  # a pair case first hid the column
            self.assertEqual(totals(rows), {
                'cases': 2, 'facts_found': 1, 'facts_total': 2, 'fact_recall': 0.5, 'complete_cases': 1,
                'cases_with_stale_facts': 0, 'over_budget': 0, 'invalid_requests': 1, 'mean_input_tokens': 40})

    def test_a_sweep_point_lays_out_the_figures_in_its_own_order_and_the_best_possibles_has_no_over_budget(self):
        self.assertEqual(list(totals(self.ROWS, POINT_TOTALS).items()), [
            ('cases', 2), ('facts_found', 1), ('facts_total', 3), ('complete_cases', 1), ('cases_with_stale_facts', 1),
            ('mean_input_tokens', 45.5), ('over_budget', 1)])
        best = [{key: row[key] for key in row if key != 'within_budget'} for row in self.ROWS]
        self.assertEqual(totals(best, POINT_TOTALS), {
            'cases': 2, 'facts_found': 1, 'facts_total': 3, 'complete_cases': 1, 'cases_with_stale_facts': 1,
            'mean_input_tokens': 45.5, 'over_budget': None, 'not_searched': 0})

    def test_splits_come_in_the_labs_order_and_other_groups_in_row_order(self):
        self.assertEqual(list(by_group(self.ROWS, 'split')), ['dev', 'held_out'])  # held_out comes first in the rows
        self.assertEqual(list(by_group(self.ROWS, 'kind')), ['temporal', 'multi-hop'])


class MemoryRowTest(unittest.TestCase):
    def test_each_line_is_graded_by_the_facts_it_holds(self):
        lines = ['- Ana lives in Lyon', '- Ana lives in Porto', '- Ana phone 555-0142', '- Ana eats no meat']
        row = memory_row(QUESTION, lines, 30, 120)
        self.assertEqual({key: row[key] for key in ('lines', 'useful_lines', 'stale_lines', 'forgotten_lines',
                                                     'required_found', 'missing', 'within_budget')},
                         {'lines': 4, 'useful_lines': 1, 'stale_lines': 1, 'forgotten_lines': 1, 'required_found': 1,
                          'missing': [], 'within_budget': True})

    def test_a_row_names_the_missing_and_stale_facts_the_answer_check_joins_its_answers_with(self):
        # answer_keys.key_grades reads both to say whether a failure was the fill's or the model's.
        row = memory_row(QUESTION, ['- Ana lives in Lyon'], 6, 90)
        self.assertEqual((row['missing'], row['stale_included']), (['Ana lives in Porto'], ['Ana lives in Lyon']))
        self.assertEqual(memory_row(QUESTION, ['- Ana lives in Porto'], 6, 90)['stale_included'], [])

    def test_totals_give_recall_of_facts_and_usefulness_of_lines(self):
        rows = [memory_row(QUESTION, ['- Ana lives in Porto', '- Ana lives in Lyon'], 12, 100),
                memory_row(QUESTION, [], 0, 60)]
        self.assertEqual(memory_totals(rows), {'questions': 2, 'required_found': 1, 'required_total': 2, 'recall': 0.5,
                                        'lines': 2, 'useful_lines': 1, 'usefulness': 0.5, 'stale_lines': 1,
                                        'forgotten_lines': 0, 'mean_memory_tokens': 6.0, 'mean_input_tokens': 80.0,
                                        'over_budget': 0})


class ChecksTest(unittest.TestCase):
    def test_the_allowance_is_the_limit_less_the_answer_and_the_margin_for_a_case_or_a_budget(self):
        self.assertEqual((allowance(CASE['budget']), allowance(CASE)), (34, 34))


if __name__ == '__main__':
    unittest.main()
