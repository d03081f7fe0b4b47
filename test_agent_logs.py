"""Real agent logs as they come: a log shaped like tau-bench's published trajectories and an OpenAI export goes
through chat_cases.py and the loader and is counted as each official template renders it; what a provider or the
counter refuses is one line (case_set.as_counted, tool_formats.checked_tools, runner.counting).

    .venv/bin/python -m unittest -v test_agent_logs   (about ten seconds; a counter not prepared skips)
"""
import contextlib
import copy
import io
import json
import unittest

from jinja2.exceptions import TemplateError

import chat_cases
from case_set import CaseError, load_cases
from shapes import build_request
from strategies import RULES
from test_support_fixtures import COUNTERS, FORMS, HERE, TempFolderTest, call, counter_or_skip
from test_support_oracle import official, official_count, template_path
from test_support_runs import evaluate_py
from tokenizer import CounterError
from tool_formats import MOST_NESTING, prompt_text


def text_parts(*texts: str) -> list[dict]:
    return [{'type': 'text', 'text': text} for text in texts]


TOOLS = [{'type': 'function', 'function': {'name': 'get_user_details', 'description': 'Get the details of a user.',
                                           'parameters': {'type': 'object', 'properties': {'user_id': {
                                               'type': 'string', 'description': 'The user id.'}},
                                               'required': ['user_id']}}},
         {'type': 'function', 'function': {'name': 'get_reservation_details', 'description': 'Get a reservation.',
                                           'parameters': {'type': 'object', 'properties': {'reservation_id': {
                                               'type': 'string'}}, 'required': ['reservation_id']}}}]
# As tau-bench's gpt-4o airline trajectories hold them: null content beside a call, arguments as a JSON string, a tool
# message naming its function, and the call id of an answered call used again in the same turn.
TAU_LIKE = {'messages': [
    {'role': 'system', 'content': '# Airline Agent Policy\n\nThe current time is 2024-05-15 15:00:00 EST.'},
    {'role': 'user', 'content': 'Hi! I want to change my flight. My user id is mia_li_3668.'},
    {'content': None, 'role': 'assistant', 'tool_calls': [call('call_A', 'get_user_details',
                                                               '{"user_id":"mia_li_3668"}')]},
    {'role': 'tool', 'tool_call_id': 'call_A', 'name': 'get_user_details',
     'content': '{"name": {"first_name": "Mia"}, "reservations": ["NO6JO3"], "membership": "gold"}'},
    {'content': None, 'role': 'assistant', 'tool_calls': [call('call_A', 'get_reservation_details',
                                                               '{"reservation_id":"NO6JO3"}')]},
    {'role': 'tool', 'tool_call_id': 'call_A', 'name': 'get_reservation_details',
     'content': '{"reservation_id": "NO6JO3", "origin": "JFK", "destination": "SEA", "cabin": "economy"}'},
    {'content': 'Your reservation NO6JO3 flies JFK to SEA in economy.', 'role': 'assistant'},
    {'role': 'user', 'content': 'Which cabin am I in?'}], 'tools': TOOLS}
# As OpenAI's API returns messages (model_dump) and accepts them back: empty fields, and content as text parts.
EXPORT = {'id': 'chat-1', 'messages': [
    {'role': 'system', 'content': 'You are a travel agent.'},
    {'role': 'user', 'content': text_parts(' Look up reservation ', 'NO6JO3. ')},
    {'role': 'assistant', 'content': None, 'refusal': None, 'annotations': [], 'audio': None, 'function_call': None,
     'tool_calls': [call('call_1', 'get_reservation_details', '{"reservation_id": "NO6JO3"}')]},
    {'role': 'tool', 'tool_call_id': 'call_1', 'content': text_parts('{"cabin": ', '"business"}')},
    {'role': 'assistant', 'content': 'It is in business.', 'refusal': None, 'annotations': [], 'audio': None,
     'function_call': None, 'tool_calls': None},
    {'role': 'user', 'content': 'And the cabin again?'}], 'tools': TOOLS}
BUDGET = {'context_limit': 2048, 'max_new_tokens': 96, 'margin': 32}
LABELS = [{'id': 'tau-like', 'conversation': 0, 'message': 7, 'split': 'dev', 'kind': 'tau-bench shape',
           'budget': BUDGET, 'required': ['"cabin": "economy"'], 'stale': []},
          {'id': 'export', 'conversation': 1, 'message': 5, 'split': 'held_out', 'kind': 'OpenAI export',
           'budget': BUDGET, 'required': ['"cabin": "business"'], 'stale': []}]


class LogsTest(TempFolderTest):
    def convert(self, logs=(TAU_LIKE, EXPORT), labels=LABELS):
        (log := self.tmp / 'logs.jsonl').write_text(''.join(json.dumps(item) + '\n' for item in logs), 'utf-8')
        (label_file := self.tmp / 'labels.json').write_text(json.dumps(labels), 'utf-8')
        chat_cases.main([str(log), '--labels', str(label_file), '--output', str(self.tmp / 'cases.json')])
        return self.tmp / 'cases.json'

    def refusal(self, log: dict, message: int = 5) -> str:
        with self.assertRaises(CaseError) as raised:
            load_cases(self.convert([log], [dict(LABELS[1], conversation=0, message=message)]))
        self.assertNotIn('\n', str(raised.exception))
        return str(raised.exception).split(': case export: ', 1)[1]

    def test_each_request_counts_as_the_official_template_renders_it_under_gemma_qwen_and_llama(self):
        cases = load_cases(self.convert())
        for name in COUNTERS:
            count = counter_or_skip(self, name)
            for case in cases:
                whole = build_request(case, range(len(case['history'])))
                for request in [whole, *(rule(case, count)['messages'] for rule in RULES.values())]:
                    with self.subTest(name, case=case['id']):
                        self.assertEqual(count(request), official_count(request, name))

    def test_evaluate_runs_the_converted_logs_under_each_counter(self):
        path = self.convert()
        for name in COUNTERS:
            counter_or_skip(self, name)
            ran = evaluate_py('--cases', str(path), '--counter', name, '--format', 'table')
            self.assertEqual((ran.returncode, ran.stderr), (0, ''), name)

    @unittest.skipIf(template_path('gemma-4-e2b') is None, "no copy of Gemma 4's official template")
    def test_text_parts_and_empty_fields_render_as_gemmas_template_renders_them_as_given(self):
        case, = [case for case in load_cases(self.convert()) if case['id'] == 'export']
        raw = copy.deepcopy(EXPORT['messages'])  # parts and OpenAI's fields as given, arguments parsed
        for message in raw:
            for each in message.get('tool_calls') or ():
                each['function']['arguments'] = json.loads(each['function']['arguments'])
        system, *rest = build_request(case, range(len(case['history'])))
        request = [{'role': 'system', 'content': system['content']}, *rest]
        self.assertEqual(prompt_text('gemma-4-e2b', FORMS['gemma-4-e2b'], request, system['tools']),
                         official('gemma-4-e2b', raw, TOOLS))
        self.assertEqual(case['history'][0][0]['content'], 'Look up reservationNO6JO3.')

    def test_only_gemmas_template_reads_text_parts_so_the_lab_joins_them_as_it_does(self):
        parts = [{'role': 'system', 'content': 's'}, {'role': 'user', 'content': text_parts('Hi')}]
        for name in ('qwen-2.5', 'phi-3.5', 'llama-3.1'):
            if template_path(name) is None:
                continue
            if name == 'llama-3.1':  # docs/agents.md says what each does
                self.assertIn("[{'type': 'text', 'text': 'Hi'}]<|eot_id|>", official(name, parts))
                continue
            with self.subTest(name), self.assertRaisesRegex(TypeError, 'can only concatenate str'):
                official(name, parts)

    def test_what_the_counters_cannot_count_is_refused_in_one_line(self):
        def changed(index: int, **fields) -> dict:
            log = copy.deepcopy(EXPORT)
            log['messages'][index].update(fields)
            return log

        image = {'type': 'image_url', 'image_url': {'url': 'data:image/png;base64,AA=='}}
        table = [
            (changed(1, content=[*text_parts('See'), image]), "field messages: message 1: content part 1 is "
             "'image_url', not {\"type\": \"text\", \"text\": string}; the counters count text only (an image, "
             'audio or file is not counted by this lab)'),
            (changed(1, content=['See']), 'field messages: message 1: content part 0 is a str, not {"type": "text", '
             '"text": string}; the counters count text only (an image, audio or file is not counted by this lab)'),
            (changed(1, content=[{'type': 'text', 'text': 5}]), 'field messages: message 1: content part 0 must be '
             '{"type": "text", "text": string}, got {"type": "text", "text": 5}'),
            (changed(0, content=text_parts('You are')), "field messages: message 0: a system message's content must "
             'be a string, not parts'),
            (changed(4, refusal='I cannot help.'), 'field messages: message 4: field refusal is read only when empty '
             '(null), since no official template renders it; got "I cannot help."'),
            (changed(2, tool_calls=call('call_1', 'f', '{}')), 'field messages: message 2: tool_calls must be a '
             'non-empty list of calls, got an object'),
        ]
        for log, says in table:
            with self.subTest(says):
                self.assertEqual(self.refusal(log), says)

    def test_tools_openai_rejects_are_refused_in_one_line(self):
        def named(name: str, parameters=None) -> dict:
            log = copy.deepcopy(EXPORT)
            log['tools'][0]['function'].update(name=name, **({} if parameters is None else {'parameters': parameters}))
            return log

        for log, says in ((named(''), "tools[0]: name '' is not 1 to 64 letters, digits, _ or -"),
                          (named('a b'), "tools[0]: name 'a b' is not 1 to 64 letters, digits, _ or -"),
                          (named('f' * 65), f"tools[0]: name {'f' * 65!r} is not 1 to 64 letters"),
                          (named('f', {'type': 'string'}), 'tools[0]: parameters must be a schema of type "object", '
                           'as OpenAI requires; its type is "string"')):
            with self.subTest(says):
                self.assertIn(f'field tools: {says}', self.refusal(log))

    def test_nesting_past_the_bound_and_a_lone_surrogate_in_tools_are_refused_not_a_traceback(self):
        deep, schema = {}, {'type': 'string'}
        for _ in range(330):  # RecursionError while rendering, before the bound
            deep, schema = {'a': deep}, {'type': 'object', 'properties': {'a': schema}}
        chat = [{'role': 'system', 'content': 's'}, {'role': 'user', 'content': 'u'},
                {'role': 'assistant', 'content': '', 'tool_calls': [call('c', 'f', deep)]},
                {'role': 'tool', 'tool_call_id': 'c', 'content': 'r'}, {'role': 'user', 'content': 'q'}]
        tools = [{'type': 'function', 'function': {'name': 'f', 'parameters': schema}}]
        surrogate = [{'type': 'function', 'function': {'name': 'f', 'description': 'a\ud800'}}]  # TypeError before
        for name in COUNTERS:
            for messages, listed, says in (
                    (chat, None, f'message 2: nests lists and objects more than {MOST_NESTING} levels deep'),
                    (chat[:2], tools, f'tools: nests lists and objects more than {MOST_NESTING} levels deep'),
                    (chat[:2], surrogate, 'tools: holds a lone surrogate (half a UTF-16 pair), which is not text')):
                with self.subTest(name, says=says), self.assertRaises(CounterError) as raised:
                    prompt_text(name, FORMS[name], messages, listed)
                self.assertTrue(str(raised.exception).startswith(says), str(raised.exception))
        case = json.loads((HERE / 'agent-cases.json').read_text(encoding='utf-8'))[0]
        (path := self.tmp / 'cases.json').write_text(json.dumps([dict(case, tools=surrogate)]), encoding='utf-8')
        with self.assertRaisesRegex(CaseError, r'field tools: tools: holds a lone surrogate \(half a UTF-16 pair\), '
                                               'which is not text$'):
            load_cases(path)
        log = copy.deepcopy(EXPORT)
        log['tools'] = surrogate
        with self.assertRaisesRegex(CaseError, r'logs.jsonl: line 1: field tools holds a lone surrogate'):
            self.convert([log], [dict(LABELS[1], conversation=0)])

    def test_a_fact_in_arguments_written_unescaped_is_refused_with_its_json_escaped_form(self):
        log = copy.deepcopy(EXPORT)
        log['messages'][2]['tool_calls'][0]['function']['arguments'] = '{"note": "say \\"hi\\""}'
        path = self.convert([log], [dict(LABELS[1], conversation=0, required=['say "hi"'])])
        with self.assertRaises(CaseError) as raised:
            load_cases(path)
        self.assertTrue(str(raised.exception).endswith(
            "field required: fact 'say \"hi\"' does not occur in any message of the history; in a call's arguments "
            "it is written JSON-escaped: 'say \\\\\"hi\\\\\"'"), str(raised.exception))

    def test_a_stale_fact_quoted_again_beside_its_correction_is_warned_about_in_one_line(self):
        log = copy.deepcopy(EXPORT)
        log['messages'][4]['content'] = 'Not "cabin": "economy" any more: it is in business.'
        path = self.convert([TAU_LIKE, log], [dict(LABELS[1], stale=['"cabin": "economy"'])])
        with contextlib.redirect_stderr(io.StringIO()) as stderr:
            load_cases(path)
        self.assertEqual(stderr.getvalue(), f'{path}: case export: warning: stale fact \'"cabin": "economy"\' is '
                         'quoted again in history turn 0, which states the required fact \'"cabin": "business"\': '
                         'every request carrying that turn sends both (docs/agents.md)\n')

    @unittest.skipIf(template_path('llama-3.1') is None, "no copy of Llama 3.1's official template")
    def test_llama_refuses_a_request_of_only_the_system_message_and_tools_as_its_template_raises(self):
        system = [{'role': 'system', 'content': 'Use the tools.'}]
        with self.assertRaisesRegex(TemplateError, "Cannot put tools in the first user message when there's no"):
            official('llama-3.1', system, TOOLS)
        with self.assertRaisesRegex(CounterError, 'on a request of only the system message and tools \\(as a '
                                                  'trimmer counting the system message alone sends'):
            prompt_text('llama-3.1', FORMS['llama-3.1'], system, TOOLS)


class NamedErrorTest(TempFolderTest):
    def test_a_counting_error_names_the_file_the_case_and_the_message_as_the_case_numbers_it(self):
        counter_or_skip(self, 'llama-3.1')
        ran = evaluate_py('--cases', 'agent-cases.json', '--counter', 'llama-3.1')
        self.assertEqual(ran.stderr, 'evaluate.py: agent-cases.json: case dev-agent-parallel: message 2: Llama 3\'s '
                                     'template raises "This model only supports single tool-calls at once!" on 2 '
                                     'calls in one message\n')

    def test_a_tools_schema_gemma_cannot_render_names_the_file_and_the_case(self):
        cases = json.loads((HERE / 'agent-cases.json').read_text(encoding='utf-8'))
        case = next(case for case in cases if case.get('tools'))
        case['tools'][0]['function']['parameters'] = {'type': 'object', 'properties': {}, 'required': 'path'}
        (path := self.tmp / 'cases.json').write_text(json.dumps([case]), encoding='utf-8')
        ran = evaluate_py('--cases', str(path))
        self.assertEqual(ran.stderr, f"evaluate.py: {path}: case {case['id']}: tools: Gemma 4's template reads "
                                     "`required` and `type` as lists, got 'path'\n")
        self.assertEqual(ran.returncode, 2)


if __name__ == '__main__':
    unittest.main()
