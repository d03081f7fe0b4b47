"""Agent cases: a message list read into turns, every mistake refused in one line, and requests graded only when a
provider would accept them (case_set.agent_case, tool_formats.invalid, scorer.graded_row)."""
import copy
from itertools import combinations
import json
import unittest

from case_set import CaseError, load_case_set, load_cases
from scorer import graded_row
from shapes import build_request, selection, turn_texts
from strategies import RULES
from lab_files import to_json
from test_support_fixtures import (HERE, TempFolderTest, calling, counter_or_skip, read, result, user,
                                   with_recorded_environment)
from test_support_oracle import OFFICIAL_PATH, official_count
from test_support_runs import evaluate_py
from tokenizer import CounterError, counter
from tool_formats import invalid

SYSTEM = {'role': 'system', 'content': 'Answer from the conversation.'}
CALL = {'id': 'c1', 'type': 'function', 'function': {'name': 'read_file', 'arguments': '{"path": "a.ini"}'}}
CASE = {'id': 'one', 'split': 'dev', 'kind': 'k', 'messages': [
    SYSTEM,
    {'role': 'user', 'content': 'Read a.ini.'},
    {'role': 'assistant', 'content': None, 'tool_calls': [CALL]},
    {'role': 'tool', 'tool_call_id': 'c1', 'content': 'port = 8443'},
    {'role': 'assistant', 'content': 'It sets the port.'},
    {'role': 'user', 'content': 'Thanks.'},
    {'role': 'assistant', 'content': 'You are welcome.'},
    {'role': 'user', 'content': 'Which port?'}],
    'budget': {'context_limit': 384, 'max_new_tokens': 96, 'margin': 32}, 'required': ['port = 8443'], 'stale': []}
READ = read('c1')
NOTE_LINES = ('- [turn 1, tool] port <b> = 8443', '- [turn 2, user] We must ship.')  # a notes block, markup too


def built_requests(case: dict):
    """(kept, notes, the request) for every set of the case's turns, without and with a notes block: each request a
    rule may build of whole turns, as count_built is asked to count it."""
    turns = range(len(case['history']))
    for kept in (list(subset) for size in range(len(turns) + 1) for subset in combinations(turns, size)):
        for notes in ((), NOTE_LINES):
            yield kept, notes, build_request(case, kept, notes)


class LoadTest(TempFolderTest):
    def load(self, cases) -> list[dict]:
        path = self.tmp / 'agent.json'
        path.write_text(json.dumps(cases), encoding='utf-8')
        return load_case_set(path)[0]

    def refusal(self, change) -> str:
        case = copy.deepcopy(CASE)
        change(case)
        with self.assertRaises(CaseError) as raised:
            self.load([case])
        return str(raised.exception).removeprefix(f'{self.tmp / "agent.json"}: case one: ')

    def test_the_messages_become_instructions_turns_and_question_with_null_content_and_string_arguments_made_plain(self):
        case, = self.load([CASE])
        self.assertEqual((case['instructions'], case['current'], case['tools']),
                         ('Answer from the conversation.', 'Which port?', []))
        self.assertEqual(case['history'], [
            [user('Read a.ini.'), {'role': 'assistant', 'content': '', 'tool_calls': [READ]},
             result('c1', 'port = 8443'), {'role': 'assistant', 'content': 'It sets the port.'}],
            [user('Thanks.'), {'role': 'assistant', 'content': 'You are welcome.'}]])

    def test_a_fact_in_a_calls_arguments_is_one_the_history_states(self):
        case = copy.deepcopy(CASE)
        case['required'] = ['"path": "a.ini"']
        self.assertEqual(self.load([case])[0]['required'], ['"path": "a.ini"'])

    def test_each_mistake_is_refused_naming_the_message_and_field(self):
        def at(index, **change):
            return lambda case: case['messages'][index].update(change)

        table = [
            (at(3, tool_call_id='c9'), 'field messages: message 3 (tool) answers no call of the assistant message before it'),
            (lambda case: case['messages'].pop(3), "field messages: message 2: call 'c1' has no result before message 3 "
             '(assistant)'),
            (lambda case: case['messages'].insert(1, {'role': 'assistant', 'content': 'Hello.'}),
             'field messages: message 1 is assistant, not a user message'),
            (lambda case: case['messages'].append({'role': 'assistant', 'content': 'Late.'}),
             'field messages: message 8 is assistant, not a user message'),
            (at(2, tool_calls=[CALL, CALL]), "field messages: message 2: call id 'c1' is used twice while unanswered"),
            (at(2, tool_calls=[dict(CALL, function={'name': 'f', 'arguments': '{"path": '})]),
             'field messages: message 2, tool call 0: arguments: invalid JSON at column 10: Expecting value'),
            (at(2, tool_calls=[dict(CALL, function={'name': 'f', 'arguments': '{"a": 1, "a": 2}'})]),
             "field messages: message 2, tool call 0: arguments: key 'a' appears twice in one object; a call's "
             'arguments string names each key once'),
            (at(2, tool_calls=[dict(CALL, function={'name': 'f', 'arguments': '[' * 100_000 + ']' * 100_000})]),
             "field messages: message 2, tool call 0: arguments: the call's arguments string is nested too deeply "
             'to read'),
            (at(2, tool_calls=CALL), 'field messages: message 2: tool_calls must be a non-empty list of calls, got an '
             'object'),
            (at(2, tool_calls=[dict(CALL, function={'name': 'f', 'arguments': '[1]'})]),
             "field messages: message 2, tool call 0: arguments must be a JSON object, got list (parse a JSON string "
             "first: Gemma 4's template raises on one, Llama 3's and Qwen 2.5's encode it twice)"),
            (at(2, tool_calls=[{'id': 'c1', 'function': {'name': 'f', 'arguments': {}}}]),
             'field messages: message 2, tool call 0: expected {"id", "type": "function", "function": {"name", '
             '"arguments"}}, id and name non-empty strings'),
            (at(2, tool_calls=[dict(CALL, function='f')]), 'field messages: message 2, tool call 0: expected {"id", '
             '"type": "function", "function": {"name", "arguments"}}, id and name non-empty strings'),
            (at(2, tool_calls=[]), 'field messages: message 2: tool_calls must be a non-empty list of calls, got an '
             'empty list'),
            (at(3, content=None), 'field messages: message 3: content must be a string, got null'),
            (at(4, content=None), 'field messages: message 4: content must be a string, got null'),
            (at(3, tool_call_id=''), 'field messages: message 3: tool_call_id must be a non-empty string, got ""'),
            (at(3, name=7), 'field messages: message 3: name must be a non-empty string, got 7'),
            (at(1, name='x'), "field messages: message 1: a user message holds ['content'] and may hold [], got "
             "['content', 'name'] (images and thinking are not counted by this lab)"),
            (at(5, role='system'), 'field messages: message 5: a system message may only come first'),
            (at(0, role='user'), 'field messages: the system message is not first'),
            (at(4, content='a <|channel>b'), 'field messages: message 4: assistant content contains a thinking-channel '
             "marker ['<|channel>', '<channel|>'], which the counter does not cover"),
            (lambda case: case.update(tools={}), 'field tools: tools[0]: expected {"type": "function", "function": '
             '{"name": str, "description": str, "parameters": object}} (tools must be a list of them)'),
            (lambda case: case.update(history=[]), "must be an object with exactly the fields ['id', 'split', 'kind', "
             "'messages', 'tools', 'budget', 'required', 'stale'] (tools optional); missing [], unexpected ['history']"),
            (lambda case: case.update(required=['port = 9']),
             "field required: fact 'port = 9' does not occur in any message of the history; a fact in a call's "
             'arguments is written JSON-escaped, as json.dumps writes it (\\" for ")'),
            (lambda case: case.update(messages=[SYSTEM, user('Which port?')]),
             'field history is empty; the required facts must be stated in its messages'),
        ]
        for change, message in table:
            with self.subTest(message):
                self.assertEqual(self.refusal(change), message)


class ValidityTest(unittest.TestCase):
    def test_a_request_a_provider_accepts_is_valid(self):
        self.assertIsNone(invalid([SYSTEM, user('a'), calling(read('c1'), read('c2')), result('c2'), result('c1'),
                                   user('q')]))
        self.assertIsNone(invalid([SYSTEM, user('q')]))

    def test_each_broken_pair_is_named_by_the_message_that_breaks_it(self):
        table = [
            ([user('a'), user('q')], 'the system message is not first'),
            ([SYSTEM, result('c1'), user('q')], 'message 1 is tool, not a user message'),
            ([SYSTEM, user('a'), result('c1'), user('q')],
             'message 2 (tool) answers no call of the assistant message before it'),
            ([SYSTEM, user('a'), calling(read('c1'), read('c2')), result('c1'), user('q')],
             "message 2: call 'c2' has no result before message 4 (user)"),
            ([SYSTEM, user('a'), calling(read('c1')), {'role': 'assistant', 'content': 'x'}, result('c1'), user('q')],
             "message 2: call 'c1' has no result before message 3 (assistant)"),
            ([SYSTEM, user('a'), calling(read('c1')), result('c1'), result('c1'), user('q')],
             'message 4 (tool) answers no call of the assistant message before it'),
            ([SYSTEM, user('a'), calling(read('c1'), read('c1')), result('c1'), result('c1'), user('q')],
             "message 2: call id 'c1' is used twice while unanswered"),
            ([SYSTEM, user('a'), calling(read('c1')), calling(read('c1')), result('c1'), user('q')],
             "message 2: call 'c1' has no result before message 3 (assistant)"),
        ]
        for messages, reason in table:
            with self.subTest(reason):
                self.assertEqual(invalid(messages), reason)

    def test_an_id_used_again_once_its_call_is_answered_is_valid_as_real_logs_reuse_them(self):
        self.assertIsNone(invalid([SYSTEM, user('a'), calling(read('c1')), result('c1'), user('b'), calling(read('c1')),
                                   result('c1'), user('q')]))
        # tau-bench's gpt-4o trajectories reuse an answered id within one turn, and OpenAI accepted them
        self.assertIsNone(invalid([SYSTEM, user('a'), calling(read('c1')), result('c1'), calling(read('c1')),
                                   result('c1'), user('q')]))


# A rules file whose rule keeps every turn but drops the calls: each result then answers no call.
DROPS_CALLS = """
from shapes import build_request

def drop_calls(case, count):
    request = build_request(case, range(len(case['history'])))
    return [message for message in request if 'tool_calls' not in message]

RULES = {'drop calls': drop_calls}
"""


class RecordedReportTest(unittest.TestCase):
    def test_a_fresh_run_on_the_agent_cases_equals_agent_evaluation_result_json_apart_from_the_environment(self):
        done = evaluate_py('--cases', 'agent-cases.json')
        self.assertEqual(done.returncode, 0, done.stderr)
        recorded = (HERE / 'agent-evaluation-result.json').read_text(encoding='utf-8')
        fresh = with_recorded_environment(json.loads(done.stdout), json.loads(recorded))
        self.assertEqual(to_json(fresh), recorded)

    def test_the_table_counts_invalid_requests_per_rule(self):
        done = evaluate_py('--cases', 'agent-cases.json', '--format', 'table')
        self.assertEqual(done.stdout.splitlines()[:3], [
            '| Strategy | Split | Facts found | Complete cases | Cases with stale facts | Invalid requests | '
            'Mean input tokens |', '|---|---|---|---|---|---|---|',
            '| recent | dev | 1 of 7 | 1 of 6 | 0 | 0 | 100.2 |'])


class CommandLineTest(TempFolderTest):
    def test_show_lays_out_each_call_the_result_that_answers_it_and_the_declared_tools(self):
        done = evaluate_py('--cases', 'agent-cases.json', '--show', 'dev-agent-parallel', '--strategy', 'relevant')
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = done.stdout.splitlines()
        self.assertIn('[turn 1, assistant] 77 tokens · calls call_a read_file {"path": ".python-version"} · calls '
                      'call_b read_file {"path": ".nvmrc"}', lines)
        self.assertEqual([line for line in lines if line.startswith('[turn 1, tool]')],
                         [f'[turn 1, tool] 0 tokens · answers {call} · written in the share of its call'
                          for call in ('call_a', 'call_b')])
        self.assertEqual(lines[-1], 'found 2 of 2 · missing: none · stale sent: none · 148 of 384 input tokens')
        tools = evaluate_py('--cases', 'agent-cases.json', '--show', 'dev-agent-tools', '--strategy', 'recent')
        self.assertIn('[system] 137 tokens · declares 2 tools', tools.stdout.splitlines())

    def test_a_broken_agent_case_stops_evaluate_with_one_line_and_exit_2(self):
        case = copy.deepcopy(CASE)
        del case['messages'][3]  # the result of the call
        path = self.tmp / 'agent.json'
        path.write_text(json.dumps([case]), encoding='utf-8')
        done = evaluate_py('--cases', str(path))
        self.assertEqual((done.returncode, done.stdout, done.stderr), (2, '', f"evaluate.py: {path}: case one: field "
                         "messages: message 2: call 'c1' has no result before message 3 (assistant)\n"))


class RulesFileTest(TempFolderTest):
    def test_a_rules_files_request_that_drops_a_call_but_keeps_its_result_is_invalid_and_carries_no_facts(self):
        rules = self.tmp / 'drop_rules.py'
        rules.write_text(DROPS_CALLS, encoding='utf-8')
        done = evaluate_py('--cases', 'agent-cases.json', '--rules', str(rules))
        self.assertEqual(done.returncode, 0, done.stderr)
        report = json.loads(done.stdout)
        rows = report['cases']['drop calls']
        self.assertEqual([row['invalid'] for row in rows][:2], [
            'message 2 (tool) answers no call of the assistant message before it',  # dev-agent-latest's first result
            'message 4 (tool) answers no call of the assistant message before it'])  # after a turn without calls
        self.assertEqual(sum(row['required_found'] for row in rows), 0)
        # A turn with a call no longer stands whole in the request; dev-agent-behind-output's first turn has none.
        self.assertEqual([row['turns'] for row in rows][:2], [[], [0]])
        self.assertEqual(report['summary']['drop calls']['dev']['invalid_requests'], 6)


@unittest.skipIf(OFFICIAL_PATH is None, 'no copy of the official Gemma 4 template to compare with')
class OfficialTemplateTest(unittest.TestCase):
    def test_every_request_the_rules_build_on_the_agent_cases_is_counted_as_the_official_template_renders_it(self):
        for case in load_cases(HERE / 'agent-cases.json'):
            whole = build_request(case, range(len(case['history'])))
            requests = [whole, *(rule(case, counter())['messages'] for rule in RULES.values())]
            for index, request in enumerate(requests):
                with self.subTest(case['id'], request=index):
                    self.assertEqual(counter()(request), official_count(request))

    def test_a_request_counted_from_the_turns_it_is_built_of_is_the_official_count(self):
        # count_built sums the head's count and each turn's rendered cost; the official template renders it whole.
        for case in load_cases(HERE / 'agent-cases.json'):
            for kept, notes, request in built_requests(case):
                with self.subTest(case['id'], kept=kept, notes=bool(notes)):
                    self.assertEqual(counter().count_built(request, case, kept, notes), official_count(request))


class OtherCountersTest(unittest.TestCase):
    def test_qwen_and_llama_count_every_request_the_rules_build_as_their_official_templates_render_it(self):
        for name in ('qwen-2.5', 'llama-3.1', 'llama-3.2', 'llama-3.3'):
            with self.subTest(name):
                self.check_counter(name, counter_or_skip(self, name))

    def check_counter(self, name: str, count) -> None:
        """Each request rendered by the official template with transformers' tojson, encoded by the counter's
        tokenizer.json (Qwen's holds its tool-call tags); Llama's template refuses parallel calls, and so does its
        count. A request counted from the turns it is built of (count_built) too, Llama's with a tools list whole."""
        for case in load_cases(HERE / 'agent-cases.json'):
            whole = build_request(case, range(len(case['history'])))
            if name.startswith('llama') and any(len(message.get('tool_calls', ())) > 1 for message in whole):
                with self.assertRaises(CounterError) as raised:
                    count(whole)
                self.assertIn('raises "This model only supports single tool-calls at once!"', str(raised.exception))
                continue
            for index, request in enumerate([whole, *(rule(case, count)['messages'] for rule in RULES.values())]):
                with self.subTest(case['id'], request=index):
                    self.assertEqual(count(request), official_count(request, name))
            for kept, notes, request in built_requests(case):
                with self.subTest(case['id'], kept=kept, notes=bool(notes)):
                    self.assertEqual(count.count_built(request, case, kept, notes), official_count(request, name))


class GradedRowTest(unittest.TestCase):
    def setUp(self):
        self.case = {'id': 'one', 'split': 'dev', 'kind': 'k', 'instructions': 'Answer.', 'current': 'Which port?',
                     'history': [[user('Read a.ini.'), calling(read('c1')), result('c1', 'port = 8443')]], 'tools': [],
                     'budget': {'context_limit': 384, 'max_new_tokens': 96, 'margin': 32},
                     'required': ['port = 8443', 'a.ini'], 'stale': []}

    def test_a_valid_request_finds_facts_in_results_and_in_arguments_and_says_it_is_valid(self):
        row = graded_row(self.case, selection(build_request(self.case, [0]), [0], 0, 100))
        self.assertEqual(list(row), ['case', 'split', 'kind', 'turns', 'notes', 'input_tokens', 'within_budget',
                                     'invalid', 'required_found', 'required_total', 'missing', 'stale_included'])
        self.assertEqual((row['invalid'], row['required_found'], row['missing']), (None, 2, []))

    def test_a_request_that_drops_a_call_but_keeps_its_result_carries_no_facts(self):
        request = build_request(self.case, [0])
        del request[2]  # the call
        row = graded_row(self.case, selection(request, [0], 0, 90))
        self.assertEqual((row['invalid'], row['required_found'], row['missing']),
                         ('message 2 (tool) answers no call of the assistant message before it', 0,
                          ['port = 8443', 'a.ini']))

    def test_a_pair_case_row_has_no_invalid_field(self):
        case = dict(self.case, history=[{'user': 'port = 8443 a.ini', 'assistant': 'ok'}])
        del case['tools']
        self.assertNotIn('invalid', graded_row(case, selection(build_request(case, [0]), [0], 0, 50)))

    def test_an_agent_turns_texts_are_its_contents_and_its_calls_names_and_arguments(self):
        self.assertEqual(turn_texts(self.case['history'][0]),
                         ('Read a.ini.', 'read_file {"path": "a.ini"}', 'port = 8443'))


if __name__ == '__main__':
    unittest.main()
