"""Tests for agent_rules.py: LangChain's trim_messages and clearing old tool results, on an agent case written for the test.

    .venv/bin/python -m unittest -v test_agent_rules

Each test is named after the failure it pins. What each rule keeps is worked out by hand: the case's first tool
result is a 60-line file, larger than the allowance, and everything else is a line or two.
"""
import copy
import json
import re
import unittest

import langchain_core
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage, trim_messages

import agent_rules
from agent_rules import CLEARED, RULES
from case_set import agent_case, load_cases
from evaluate import report
from scorer import graded_row
from shapes import build_request
from strategies import recent
from test_support_fixtures import HERE, calling, read, result, said, user
from test_support_runs import evaluate_py
from tokenizer import counter
from tool_formats import invalid

SYSTEM = {'role': 'system', 'content': 'You are a coding agent.'}
CONFIG = '\n'.join(f'option_{n:02d} = {n * 7}' for n in range(60)) + '\ntimeout_seconds = 30'  # > the allowance
TURNS = [[user('Read app.toml.'), calling(read('c1', 'app.toml')), result('c1', CONFIG), said('It sets the timeout to 30.')],
         [user('I edited it. Read it again.'), calling(read('c2', 'app.toml')), result('c2', 'timeout_seconds = 90'),
          said('Now it is 90.')],
         [user('Read the two logs.'), calling(read('c3', 'a.log'), read('c4', 'b.log')), result('c3', 'a: clean'),
          result('c4', 'b: clean'), said('Both are clean.')]]
QUESTION = user('What is the timeout now?')
CASE = agent_case('test', {
    'id': 'hand', 'split': 'dev', 'kind': 'k', 'messages': [SYSTEM, *sum(TURNS, []), QUESTION],
    'budget': {'context_limit': 384, 'max_new_tokens': 96, 'margin': 32},  # an allowance of 256
    'required': ['timeout_seconds = 90'], 'stale': ['timeout_seconds = 30']})


def run(name: str, case: dict = CASE) -> dict:
    return RULES[name](case, counter())


class TrimLastTest(unittest.TestCase):
    def test_trim_last_drops_the_system_message_and_starts_on_the_result_whose_call_it_cut(self):
        # From the question back, everything up to c1's result fits; so does that result, since Gemma's template
        # drops a result whose call is gone; c1's call does not, as it brings the 60 lines back in.
        chosen = run('trim-last')
        self.assertEqual(chosen['messages'], [result('c1', CONFIG), TURNS[0][3], *TURNS[1], *TURNS[2], QUESTION])
        self.assertEqual(chosen['turns'], [0, 1, 2])  # turn 0 reached it by two of its messages
        self.assertEqual(invalid(chosen['messages']), 'the system message is not first')
        self.assertEqual(graded_row(CASE, chosen)['required_found'], 0)  # an invalid request carries no fact

    def test_trim_last_human_keeps_the_system_message_and_starts_on_the_user_message_of_a_whole_turn(self):
        chosen = run('trim-last-human')
        self.assertEqual(chosen['messages'], [SYSTEM, *TURNS[1], *TURNS[2], QUESTION])
        self.assertEqual((chosen['turns'], invalid(chosen['messages'])), ([1, 2], None))

    def test_a_kept_system_message_carries_the_cases_tools(self):
        tools = [{'type': 'function', 'function': {'name': 'read_file', 'parameters': {'type': 'object'}}}]
        chosen = run('trim-last-human', dict(CASE, tools=tools))
        self.assertEqual(chosen['messages'][0], dict(SYSTEM, tools=tools))

    def test_the_counter_is_asked_about_requests_in_their_order_not_newest_first(self):
        # trim_messages' 'last' hands token_counter its candidates reversed; a template's count depends on order.
        asked, full = [], build_request(CASE, [0, 1, 2])
        places = {json.dumps(message, sort_keys=True): place for place, message in enumerate(full)}

        def counting(messages: list[dict]) -> int:
            asked.append([places[json.dumps(message, sort_keys=True)] for message in messages])
            return counter()(messages)
        for name in ('trim-last', 'trim-last-human'):
            RULES[name](CASE, counting)
        self.assertTrue(asked)
        self.assertEqual([places for places in asked if places != sorted(places)], [])

    def test_every_message_comes_back_from_langchain_as_the_lab_built_it(self):
        tools = [{'type': 'function', 'function': {'name': 'read_file'}}]
        named = [user('Read c.log.'), calling(read('c9', 'c.log')), dict(result('c9', 'x'), name='read_file')]
        case = agent_case('test', {'id': 'named', 'split': 'dev', 'kind': 'k', 'messages': [SYSTEM, *named, QUESTION],
                                   'tools': tools, 'budget': CASE['budget'], 'required': ['x'], 'stale': []})
        for name in ('trim-last', 'trim-last-human'):
            chosen = run(name, case)
            self.assertEqual(json.dumps(chosen['messages']), json.dumps(build_request(case, [0])), name)  # key order too


class ClearToolResultsTest(unittest.TestCase):
    def test_all_but_the_newest_three_results_are_cleared_and_the_request_counted_as_sent(self):
        chosen = run('clear-tool-results')
        self.assertEqual(chosen['messages'], [SYSTEM, *TURNS[0][:2], result('c1', CLEARED), TURNS[0][3],
                                              *TURNS[1], *TURNS[2], QUESTION])
        self.assertEqual((chosen['turns'], invalid(chosen['messages'])), ([0, 1, 2], None))
        self.assertEqual(chosen['input_tokens'], counter()(chosen['messages']))
        self.assertEqual(graded_row(CASE, chosen)['stale_included'], [])

    def test_a_pair_case_has_no_tool_result_to_clear_so_the_rule_is_recent(self):
        for case in load_cases(HERE / 'cases.json'):
            self.assertEqual(run('clear-tool-results', case), recent(case, counter()))


class CaseTest(unittest.TestCase):
    def test_no_rule_changes_the_case_it_is_given(self):
        for name in RULES:
            case = copy.deepcopy(CASE)
            run(name, case)
            self.assertEqual(case, CASE, name)

    def test_every_rules_size_is_its_request_counted_whole(self):
        for name in RULES:
            chosen = run(name)
            self.assertEqual(chosen['input_tokens'], counter()(chosen['messages']), name)


class LangChainTest(unittest.TestCase):
    def test_issue_33245_trim_last_returns_a_leading_tool_message_on_the_pinned_version(self):
        history = [SystemMessage('s'), HumanMessage('read a'), AIMessage('', tool_calls=[
            {'id': 'c1', 'name': 'read_file', 'args': {'path': 'a'}, 'type': 'tool_call'}]),
            ToolMessage('a: 1', tool_call_id='c1'), AIMessage('It is 1.'), HumanMessage('and b?')]
        kept = trim_messages(history, max_tokens=3, token_counter=len, strategy='last')
        self.assertEqual([message.type for message in kept], ['tool', 'ai', 'human'])

    def test_the_installed_langchain_core_is_the_pinned_one_the_docstring_names(self):
        pin = re.search(r'^langchain-core==(\S+)', (HERE / 'requirements.txt').read_text(encoding='utf-8'), re.M)[1]
        self.assertEqual(langchain_core.__version__, pin)
        self.assertIn(f'langchain-core {pin}', agent_rules.__doc__)


class LabTest(unittest.TestCase):
    def test_the_rules_file_runs_through_evaluate_and_prints_each_rules_rows(self):
        ran = evaluate_py('--cases', 'agent-cases.json', '--rules', 'agent_rules.py', '--format', 'table')
        self.assertEqual(ran.returncode, 0, ran.stderr)
        names = [line.split(' | ')[0] for line in ran.stdout.splitlines()]
        for name in RULES:
            self.assertEqual(names.count(f'| {name}'), 2)  # dev and held-out
        readme = (HERE / 'README.md').read_text(encoding='utf-8').split('## Agent histories')[1].split('\n## ')[0]
        shown = [line for line in readme.splitlines() if line.startswith('|')]
        self.assertEqual(shown, ran.stdout.splitlines())  # the whole table, the four rules' rows too

    def test_the_rules_process_changes_no_row_of_the_agent_rules_but_the_turns_it_works_out_itself(self):
        # The lab ignores a rules file's turns and counts a turn only when all its messages stand in a row, as
        # the history has them (docs/rules.md); trim-last's request holds the end of a turn whose call it cut,
        # clear-tool-results' a turn whose result it cleared, which this file counts.
        cases = load_cases(HERE / 'agent-cases.json')
        rows = report(HERE / 'agent-cases.json', [HERE / 'agent_rules.py'])['cases']
        for name, rule in RULES.items():
            here = [graded_row(case, rule(case, counter())) for case in cases]
            self.assertEqual([dict(row, turns=None) for row in rows[name]], [dict(row, turns=None) for row in here])
            parted = [(there['turns'], row['turns']) for there, row in zip(rows[name], here) if there != row]
            self.assertEqual(bool(parted), name != 'trim-last-human', name)
            self.assertTrue(all(set(there) < set(mine) for there, mine in parted))


if __name__ == '__main__':
    unittest.main()
