"""Tests for synthetic_cases.py: the generated case sets benchmark.py times.

    .venv/bin/python -m unittest -v test_synthetic_cases   (under a second)

Each test is named after the failure it pins: a seed that gives other cases on another run, a planted fact the
case set's own check would refuse, a stale limit that is not the correction's replaced one.
"""
import re
import unittest

from case_set import check_case
from scorer import facts_in
from shapes import build_request
from synthetic_cases import as_agent, chat_case, generated_cases, synthetic_case


class GeneratedTest(unittest.TestCase):
    def test_one_seed_gives_the_same_cases_and_another_seed_others(self):
        self.assertEqual(generated_cases(synthetic_case, 3, 20, 7), generated_cases(synthetic_case, 3, 20, 7))
        self.assertNotEqual(generated_cases(chat_case, 3, 20, 7), generated_cases(chat_case, 3, 20, 8))

    def test_every_case_passes_the_case_check_and_its_stale_limit_is_the_corrected_one_plus_seven_per_hour(self):
        for case in generated_cases(synthetic_case, 5, 12, 1):
            with self.subTest(case['id']):
                check_case(f"case {case['id']}", case)  # every planted fact lies in a message of its history
                topic, value = re.fullmatch(r'(\w+) limit is (\d+) per minute', case['required'][0]).groups()
                self.assertEqual(case['stale'], [f'{topic} limit is {int(value) + 7} per hour'])
                self.assertEqual(case['current'], f'What is the {topic} limit, and who owns {topic}?')
                self.assertEqual(case['split'], 'held_out' if int(case['id'].split('-')[1]) % 2 == 0 else 'dev')


class AgentFormTest(unittest.TestCase):
    def test_each_turn_becomes_the_user_message_a_call_and_the_reply_as_its_result(self):
        case = {'id': 'x', 'history': [{'user': 'Hi', 'assistant': 'Yes'}], 'required': [], 'stale': []}
        call = {'id': 'call_0', 'type': 'function', 'function': {'name': 'recall', 'arguments': {}}}
        self.assertEqual(as_agent(case), {'id': 'x', 'required': [], 'stale': [], 'tools': [], 'history': [[
            {'role': 'user', 'content': 'Hi'}, {'role': 'assistant', 'content': '', 'tool_calls': [call]},
            {'role': 'tool', 'tool_call_id': 'call_0', 'content': 'Yes'}]]})
        self.assertEqual(case['history'], [{'user': 'Hi', 'assistant': 'Yes'}])  # the case itself is left as it was

    def test_the_agent_form_holds_the_same_facts_as_the_pair_form(self):
        for case in generated_cases(synthetic_case, 3, 12, 2):
            every = range(len(case['history']))
            self.assertEqual(facts_in(as_agent(case), build_request(as_agent(case), every)),
                             facts_in(case, build_request(case, every)))
            self.assertEqual(facts_in(case, build_request(case, every)), (case['required'], case['stale']))


if __name__ == '__main__':
    unittest.main()
