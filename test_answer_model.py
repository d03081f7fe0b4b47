"""Tests for the pin and the shape of a recording (answer_model.py), its request bodies, and `answer_check.py check`.

    .venv/bin/python -m unittest -v test_answer_model.py

The check command runs against the fake Ollama server of test_support.py on 127.0.0.1; no model is called. Every
file a test writes goes to a temporary directory. Every HTTP request in these tests is checked to go to 127.0.0.1,
and OLLAMA_HOST points at a closed loopback port, so no test can reach a real server.
"""
import json
import os
from pathlib import Path
import re
import tempfile
import unittest
from unittest import mock

import answer_model
from answer_model import load_model, load_recording
from test_support import FakeOllama, OTHER, PINNED, SERVER_VERSION, only_loopback as setUpModule
from test_support_fixtures import HERE, PYTHON, REDO, Rejecting, recorded_answer as answer
from test_support_runs import run_answer_check


class CheckCommandTest(unittest.TestCase):
    def test_versions_that_leave_cached_prompt_tokens_uncounted(self):
        for version, expected in (('0.30.0', True), ('0.30.0-rc5', True), ('0.1.48', True), ('0.1.32', True),
                                  ('0.30.1', False), ('0.1.49', False), ('0.29.9', False), ('0.32.14', False),
                                  ('0.0.0', False), ('unknown', False)):
            with self.subTest(version=version):
                self.assertEqual(answer_model.undercounts_cached_prompt(version), expected)

    def test_check_command_names_the_server_and_the_pinned_digest(self):
        with FakeOllama() as fake, mock.patch.dict(os.environ, {'OLLAMA_HOST': fake.host}):
            result = run_answer_check(['check'])
        self.assertEqual(result, (0, f'Ollama {SERVER_VERSION} at {fake.host} has gemma4:e2b with the pinned digest '
                                     f'{PINNED}\n', ''))
        self.assertEqual([path for _, path, _ in fake.requests], ['/api/version', '/api/tags'])

    def test_check_command_checks_the_pin_a_user_made(self):
        with tempfile.TemporaryDirectory() as folder:
            pin = Path(folder) / 'my-model.json'
            pin.write_text(json.dumps({**load_model(), 'ollama_tag': 'tiny:1b', 'ollama_digest': OTHER}))
            for digest, expected in ((OTHER, 0), (PINNED, 2)):
                with self.subTest(digest=digest), FakeOllama(digest=digest, tags=('tiny:1b',)) as fake, \
                        mock.patch.dict(os.environ, {'OLLAMA_HOST': fake.host}):
                    code, out, err = run_answer_check(['check', '--model', str(pin)])
                self.assertEqual(code, expected, err)
                if expected == 0:
                    self.assertEqual((out, err), (f'Ollama {SERVER_VERSION} at {fake.host} has tiny:1b with the '
                                                  f'pinned digest {OTHER}\n', ''))
                else:
                    self.assertIn(f'has tiny:1b with digest {PINNED}, but the pinned build is {OTHER}', err)


class RequestBodyTest(unittest.TestCase):
    def test_an_agent_cases_tools_go_at_the_top_level_where_both_apis_read_them(self):
        tools = [{'type': 'function', 'function': {'name': 'run_tests', 'parameters': {'type': 'object'}}}]
        messages = [{'role': 'system', 'content': 'Be brief.', 'tools': tools}, {'role': 'user', 'content': 'Go.'}]
        openai = {'api': 'openai', 'model_id': 'm', 'options': {'temperature': 0.7, 'top_p': 0.8}}
        for model in (load_model(), openai):
            with self.subTest(api=answer_model.api(model)):
                body = answer_model.chat_body(model, messages, 4096, 64, 3)
                self.assertEqual((body['tools'], body['messages']),
                                 (tools, [{'role': 'system', 'content': 'Be brief.'}, messages[1]]))
        self.assertEqual(messages[0]['tools'], tools)  # the case's own messages are left as they were
        self.assertEqual(answer_model.chat_body(openai, messages[1:], 4096, 64, 3), {
            'model': 'm', 'messages': messages[1:], 'stream': False, 'temperature': 0.7, 'top_p': 0.8, 'seed': 3,
            'max_tokens': 64})  # no tools field where the case has none, and no num_ctx: the server fixed it

    def test_the_tools_are_sent_in_the_order_the_case_gives_their_keys(self):
        # A template writes the tools' JSON as it reads it: sorted keys would be another prompt than the one counted.
        tools = [{'type': 'function', 'function': {'name': 'run', 'parameters': {'type': 'object', 'properties': {}}}}]
        body = answer_model.chat_body(load_model(), [{'role': 'system', 'content': 'x', 'tools': tools}], 384, 96, 1)
        sent = json.loads(answer_model.encode(body))  # as a server reads it, in order
        self.assertEqual(json.dumps(sent['tools']), json.dumps(tools))
        self.assertEqual(list(sent), ['model', 'messages', 'stream', 'think', 'options', 'tools'])

    def test_closest_counter_is_the_tags_own_and_none_for_a_tag_outside_the_lab(self):
        for tag, family, expected in (('llama3.2:1b', 'llama', 'llama-3.2'), ('llama3.3:70b', 'llama', 'llama-3.3'),
                                      ('qwen2.5-coder:0.5b', 'qwen2', 'qwen-2.5'), ('tiny:1b', 'gemma4', 'gemma-4-e2b'),
                                      ('mistral:7b', 'llama', None), ('llama3:8b', 'llama', None)):
            with self.subTest(tag=tag):
                self.assertEqual(answer_model.closest_counter(tag, family), expected)
        with self.assertRaisesRegex(answer_model.LabError, r'closest finds none: the family llama holds llama-3\.1, '
                                    r'llama-3\.2, llama-3\.3, and Ollama reports it for other models too$'):
            answer_model.new_pin_counter('mistral:7b', 'llama', answer_model.CLOSEST)

    def test_the_recording_imports_no_client(self):
        imported = re.findall(r'^\s*(?:from|import) (\w+)', (HERE / 'answer_model.py').read_text(), re.MULTILINE)
        self.assertEqual({'ollama_client', 'openai_client'} & set(imported), set())


def one_answer_recording(model: dict | None = None) -> dict:
    """A well-formed recording: two answers of recent to held-latest."""
    return {'model': model if model is not None else load_model(),
            'answers': {'recent': {'held-latest': [answer('Mateo.', 1), answer('Mateo reviews it.', 2)]}}}


class RecordingValidationTest(Rejecting):
    def load(self, recorded: dict) -> str:
        return self.rejection(lambda path: load_recording(path, REDO),
                              'answer-result.json', recorded)

    def test_a_well_formed_recording_loads(self):
        recorded = one_answer_recording()
        recorded['answers']['recent']['held-latest'][1].update(
            done_reason=None, tool_calls=[{'function': {'name': 'lookup', 'arguments': {}}}])
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'answer-result.json'
            path.write_text(json.dumps(recorded))
            self.assertEqual(load_recording(path, REDO), recorded)

    def test_every_answer_field_has_its_type_checked(self):
        where = 'answers.recent.held-latest[1]'
        for field, value, expected in (
                ('seed', [1], 'field seed must be an integer, got [1]'),
                ('seed', True, 'field seed must be an integer, got true'),
                ('answer', None, 'field answer must be a string, got null'),
                ('tool_calls', None, 'field tool_calls must be a list of objects, got null'),
                ('tool_calls', ['lookup'], 'field tool_calls must be a list of objects, got ["lookup"]'),
                ('done_reason', 0, 'field done_reason must be a string or null, got 0'),
                ('prompt_tokens', -1, 'field prompt_tokens must be a non-negative integer, got -1'),
                ('answer_tokens', 9.0, 'field answer_tokens must be a non-negative integer, got 9.0'),
                ('input_tokens', '50', 'field input_tokens must be a non-negative integer, got "50"'),
                ('request_sha256', 'abc', 'field request_sha256 must be 64 lowercase hex digits, got "abc"'),
                ('request_sha256', 'A' * 64, 'field request_sha256 must be 64 lowercase hex digits')):
            with self.subTest(field=field, value=value):
                recorded = one_answer_recording()
                recorded['answers']['recent']['held-latest'][1][field] = value
                self.assertIn(f'{where}: {expected}', self.load(recorded))

    def test_strategies_cases_and_answer_lists_are_checked(self):
        for name, change, expected in (
                ('strategy not an object', lambda a: a.update(recent=[1]),
                 'recording: field answers.recent must be an object, got [1]'),
                ('answers not a list', lambda a: a['recent'].update({'held-latest': {'seed': 1}}),
                 'answers.recent.held-latest must be a non-empty list, got {"seed": 1}'),
                ('no answers', lambda a: a['recent'].update({'held-latest': []}),
                 'answers.recent.held-latest must be a non-empty list, got []'),
                ('missing field', lambda a: a['recent']['held-latest'][0].pop('input_tokens'),
                 "answers.recent.held-latest[0]: must be an object with exactly the fields"),
                ('extra field', lambda a: a['recent']['held-latest'][0].update(thinking=''),
                 "unexpected ['thinking']"),
                ('answer not an object', lambda a: a['recent']['held-latest'].append('Mateo.'),
                 'answers.recent.held-latest[2]: must be an object with exactly the fields'),
                # The original's six fields, then the lab's: one recording holds answers of one format.
                ('formats mixed', lambda a: [a['recent']['held-latest'][0].pop(f) for f in ('request_sha256',
                                                                                           'input_tokens')],
                 "answers.recent.held-latest[1]: must be an object with exactly the fields ['seed', 'answer', "
                 "'tool_calls', 'done_reason', 'prompt_tokens', 'answer_tokens']; missing [], unexpected "
                 "['input_tokens', 'request_sha256']")):
            with self.subTest(name):
                recorded = one_answer_recording()
                change(recorded['answers'])
                self.assertIn(expected, self.load(recorded))

    def test_model_block_must_be_a_pin_naming_the_server_version(self):
        model = load_model()
        del model['ollama_version']
        self.assertIn("model: must be an object with exactly the fields", self.load(one_answer_recording(model)))
        self.assertIn("missing ['ollama_version']", self.load(one_answer_recording(model)))
        self.assertIn('model: field seeds must be distinct integers', self.load(one_answer_recording(
            {**load_model(), 'seeds': [1.0, 2, 3, 4, 5]})))

    def test_a_pins_counter_must_be_one_the_lab_has(self):
        for value, got in (('llama-3', '"llama-3"'), ([], '[]'), (None, 'null')):
            with self.subTest(value=value):
                self.assertIn('model: field counter must be one of gemma-4-e2b, llama-3.1, llama-3.2, llama-3.3, '
                              f'qwen-2.5, phi-3.5, got {got}',
                              self.load(one_answer_recording({**load_model(), 'counter': value})))

    def test_loaded_context_length_must_be_a_positive_integer(self):
        for value, got in ((0, '0'), (4096.0, '4096.0'), ('4096', '"4096"'), (True, 'true'), (None, 'null')):
            with self.subTest(value=value):
                model = {**load_model(), 'loaded_context_length': value}
                self.assertIn(f'model: field loaded_context_length must be a positive integer, got {got}',
                              self.load(one_answer_recording(model)))

    def test_malformed_answer_exits_2_without_a_traceback(self):
        recorded = one_answer_recording()
        recorded['answers']['recent']['held-latest'][0]['seed'] = [1]
        with tempfile.TemporaryDirectory() as folder:
            result = Path(folder) / 'answer-result.json'
            result.write_text(json.dumps(recorded))
            code, out, err = run_answer_check([], result_path=result, grades_path=Path(folder) / 'grades.json')
        self.assertEqual((code, out), (2, ''))
        self.assertEqual(err, f'answer_check.py: {result}: answers.recent.held-latest[0]: field seed must be an '
                              f'integer, got [1]; record again with `{PYTHON} answer_check.py record`, or restore it '
                              'from version control\n')


if __name__ == '__main__':
    unittest.main()
