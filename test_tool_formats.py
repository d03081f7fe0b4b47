"""Tests for tool_formats.py: agent requests (tool calls, tool results, a tools list) rendered as each counter's
official chat template renders them. Each test is named after the failure it pins.

    .venv/bin/python -m unittest -v test_tool_formats

The oracle is the official template (Gemma 4's test_support_oracle.OFFICIAL_PATH, the others' prepared-NAME/
chat_template.jinja) rendered with jinja2 as transformers' apply_chat_template renders it (test_support_oracle.
official). An oracle check skips where its template is missing; the hand-written expected texts, worked out by
reading each template, are checked everywhere. Property tests run a bounded number of examples, keep no example
database, and write nothing to ./.hypothesis.
"""
import itertools
import unittest

from hypothesis import given, settings, strategies as st
from jinja2.exceptions import TemplateError

from common import LabError
from test_support_fixtures import FORMS, MANY_EXAMPLES, call, hypothesis_home_outside_the_tree as setUpModule
from test_support_oracle import TOOL_FAMILIES, compiled, official, template_path
from tool_formats import THINKING_MARKERS, CounterError, as_rendered, prompt_text, refuse_thinking, turn_prompt_text


SYSTEM = {'role': 'system', 'content': 'Use the tools.'}
ASK = {'role': 'user', 'content': 'What is in notes.txt?'}
CALL = {'role': 'assistant', 'content': '',
        'tool_calls': [call('call_1', 'read_file', {'path': 'notes.txt', 'Lines': 2})]}
RESULT = {'role': 'tool', 'tool_call_id': 'call_1', 'content': 'Ship on Friday.'}
ANSWER = {'role': 'assistant', 'content': 'It says to ship on Friday.'}
QUESTION = {'role': 'user', 'content': 'When do we ship?'}
CHAT = [SYSTEM, ASK, CALL, RESULT, ANSWER, QUESTION]
PARALLEL = [SYSTEM, ASK, {'role': 'assistant', 'content': 'Reading both.', 'tool_calls': [
    call('call_1', 'read_file', {'path': 'a.txt'}), call('call_2', 'search', {'query': 'ship date'})]},
    {'role': 'tool', 'tool_call_id': 'call_2', 'content': 'Friday'},
    {'role': 'tool', 'tool_call_id': 'call_1', 'content': 'A'}, QUESTION]
TOOLS = [{'type': 'function', 'function': {'name': 'read_file', 'description': 'Read a file (UTF-8, é).',
                                           'parameters': {'type': 'object', 'properties': {
                                               'path': {'type': 'string', 'description': 'Where.'}},
                                               'required': ['path']}}}]
LLAMA_SYSTEM = ('<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n'
                'Today Date: 26 Jul 2024\n\nUse the tools.<|eot_id|>')
QWEN_TOOLS = ('\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided '
              'with function signatures within <tools></tools> XML tags:\n<tools>\n{"type": "function", "function": '
              '{"name": "read_file", "description": "Read a file (UTF-8, é).", "parameters": {"type": "object", '
              '"properties": {"path": {"type": "string", "description": "Where."}}, "required": ["path"]}}}\n</tools>'
              '\n\nFor each '
              'function call, return a json object with function name and arguments within <tool_call></tool_call> XML '
              'tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')
# Each family's prompt for (messages, tools), written out by reading its official template.
EXPECTED = {
    'gemma-4-e2b': [
        (CHAT, None, '<bos><|turn>system\nUse the tools.<turn|>\n<|turn>user\nWhat is in notes.txt?<turn|>\n'
         '<|turn>model\n<|tool_call>call:read_file{Lines:2,path:<|"|>notes.txt<|"|>}<tool_call|>'
         '<|tool_response>response:read_file{value:<|"|>Ship on Friday.<|"|>}<tool_response|>'
         'It says to ship on Friday.<turn|>\n'
         '<|turn>user\nWhen do we ship?<turn|>\n<|turn>model\n'),
        (PARALLEL, None, '<bos><|turn>system\nUse the tools.<turn|>\n<|turn>user\nWhat is in notes.txt?<turn|>\n'
         '<|turn>model\n<|tool_call>call:read_file{path:<|"|>a.txt<|"|>}<tool_call|><|tool_call>call:search{query:'
         '<|"|>ship date<|"|>}<tool_call|><|tool_response>response:search{value:<|"|>Friday<|"|>}<tool_response|>'
         '<|tool_response>response:read_file{value:<|"|>A<|"|>}<tool_response|>Reading both.<turn|>\n'
         '<|turn>user\nWhen do we ship?<turn|>\n<|turn>model\n'),
        ([SYSTEM, QUESTION], TOOLS, '<bos><|turn>system\nUse the tools.<|tool>declaration:read_file{description:'
         '<|"|>Read a file (UTF-8, é).<|"|>,parameters:{properties:{path:{description:<|"|>Where.<|"|>,type:<|"|>'
         'STRING<|"|>}},required:[<|"|>path<|"|>],type:<|"|>OBJECT<|"|>}}<tool|><turn|>\n<|turn>user\n'
         'When do we ship?<turn|>\n<|turn>model\n')],
    'llama-3.1': [
        (CHAT, None, LLAMA_SYSTEM + '<|start_header_id|>user<|end_header_id|>\n\nWhat is in notes.txt?<|eot_id|>'
         '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "read_file", "parameters": {"path": "notes.txt", '
         '"Lines": 2}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n"Ship on Friday."<|eot_id|>'
         '<|start_header_id|>assistant<|end_header_id|>\n\nIt says to ship on Friday.<|eot_id|>'
         '<|start_header_id|>user<|end_header_id|>\n\nWhen do we ship?<|eot_id|><|start_header_id|>assistant'
         '<|end_header_id|>\n\n'),
        ([SYSTEM, QUESTION], TOOLS, LLAMA_SYSTEM.replace('\n\nCutting', '\n\nEnvironment: ipython\nCutting')
         + '<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON for '
         'a function call with its proper arguments that best answers the given prompt.\n\nRespond in the format '
         '{"name": function name, "parameters": dictionary of argument name and its value}.Do not use variables.\n\n'
         '{\n    "type": "function",\n    "function": {\n        "name": "read_file",\n'
         '        "description": "Read a file (UTF-8, é).",\n'
         '        "parameters": {\n            "type": "object",\n            "properties": {\n'
         '                "path": {\n'
         '                    "type": "string",\n                    "description": "Where."\n                }\n'
         '            },\n            "required": [\n                "path"\n            ]\n        }\n    }\n}\n\n'
         'When do we ship?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n')],
    'qwen-2.5': [
        (CHAT, None, '<|im_start|>system\nUse the tools.<|im_end|>\n<|im_start|>user\nWhat is in notes.txt?<|im_end|>\n'
         '<|im_start|>assistant\n<tool_call>\n{"name": "read_file", "arguments": {"path": "notes.txt", "Lines": 2}}\n'
         '</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nShip on Friday.\n</tool_response><|im_end|>\n'
         '<|im_start|>assistant\nIt says to ship on Friday.<|im_end|>\n<|im_start|>user\nWhen do we ship?<|im_end|>\n'
         '<|im_start|>assistant\n'),
        (PARALLEL, None, '<|im_start|>system\nUse the tools.<|im_end|>\n<|im_start|>user\nWhat is in notes.txt?'
         '<|im_end|>\n<|im_start|>assistant\nReading both.\n<tool_call>\n{"name": "read_file", "arguments": {"path": '
         '"a.txt"}}\n</tool_call>\n<tool_call>\n{"name": "search", "arguments": {"query": "ship date"}}\n</tool_call>'
         '<|im_end|>\n<|im_start|>user\n<tool_response>\nFriday\n</tool_response>\n<tool_response>\nA\n'
         '</tool_response><|im_end|>\n<|im_start|>user\nWhen do we ship?<|im_end|>\n<|im_start|>assistant\n'),
        ([SYSTEM, QUESTION], TOOLS, '<|im_start|>system\nUse the tools.' + QWEN_TOOLS + '<|im_end|>\n<|im_start|>user\n'
         'When do we ship?<|im_end|>\n<|im_start|>assistant\n')]}
EXPECTED['llama-3.2'] = EXPECTED['llama-3.3'] = EXPECTED['llama-3.1']
# SmolLM2's plain ChatML: a tool message under its own role; the tools list, the calls and their arguments dropped.
EXPECTED['smollm2-135m'] = [
    (CHAT, TOOLS, '<|im_start|>system\nUse the tools.<|im_end|>\n<|im_start|>user\nWhat is in notes.txt?<|im_end|>\n'
     '<|im_start|>assistant\n<|im_end|>\n<|im_start|>tool\nShip on Friday.<|im_end|>\n<|im_start|>assistant\nIt says '
     'to ship on Friday.<|im_end|>\n<|im_start|>user\nWhen do we ship?<|im_end|>\n<|im_start|>assistant\n'),
    (PARALLEL[1:], None, '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face'
     '<|im_end|>\n<|im_start|>user\nWhat is in notes.txt?<|im_end|>\n<|im_start|>assistant\nReading both.<|im_end|>\n'
     '<|im_start|>tool\nFriday<|im_end|>\n<|im_start|>tool\nA<|im_end|>\n<|im_start|>user\nWhen do we ship?'
     '<|im_end|>\n<|im_start|>assistant\n')]


class OracleTest(unittest.TestCase):
    def test_the_oracles_tojson_is_transformers_keeping_non_ascii_and_markup_honouring_indent_and_key_order(self):
        """Worked out by hand from json.dumps with transformers' defaults; jinja2's own filter would have sorted the
        keys and written '{"a": [1, 2], "b": "\\u00e9 \\u003c\\u65e5\\u672c\\u003e"}'."""
        value = {'b': 'é <日本>', 'a': [1, 2]}
        self.assertEqual(compiled('{{ value | tojson }}').render(value=value), '{"b": "é <日本>", "a": [1, 2]}')
        self.assertEqual(compiled('{{ value | tojson(indent=2) }}').render(value=value),
                         '{\n  "b": "é <日本>",\n  "a": [\n    1,\n    2\n  ]\n}')
        self.assertEqual(compiled('{{ value | tojson(separators=(",", ":"), sort_keys=true) }}').render(value=value),
                         '{"a":[1,2],"b":"é <日本>"}')


class ToolFormatTest(unittest.TestCase):
    def assert_official(self, name: str, messages: list[dict], tools, expected: str) -> None:
        """expected is the official render, where the template is at hand."""
        if template_path(name) is not None:
            self.assertEqual(official(name, messages, tools), expected)

    def assert_both_refuse(self, name: str, messages: list[dict], template_says: str, ours_says: str) -> None:
        if template_path(name) is not None:
            with self.assertRaisesRegex(TemplateError, template_says):
                official(name, messages)
        with self.assertRaises(CounterError) as caught:
            prompt_text(name, FORMS[name], messages)
        self.assertIsInstance(caught.exception, LabError)
        self.assertIn(ours_says, str(caught.exception))
        self.assertNotIn('\n', str(caught.exception))


class HandWrittenTest(ToolFormatTest):
    def test_a_call_its_result_parallel_calls_and_a_tools_list_render_as_each_template_writes_them(self):
        for name, examples in EXPECTED.items():
            for number, (messages, tools, expected) in enumerate(examples):
                with self.subTest(name=name, example=number):
                    self.assertEqual(prompt_text(name, FORMS[name], messages, tools), expected)
                    self.assert_official(name, messages, tools, expected)

    def test_llama_refuses_two_calls_in_one_message_as_its_template_raises(self):
        for name in ('llama-3.1', 'llama-3.2', 'llama-3.3'):
            self.assert_both_refuse(name, PARALLEL, 'only supports single tool-calls at once', 'message 2: ')

    def test_gemma_refuses_string_arguments_as_its_template_raises(self):
        as_logged = [SYSTEM, ASK, {**CALL, 'tool_calls': [call('call_1', 'read_file', '{"path": "notes.txt"}')]},
                     RESULT, QUESTION]
        self.assert_both_refuse('gemma-4-e2b', as_logged, 'must be a JSON object', 'message 2, tool call 0: ')

    def test_llama_and_qwen_encode_string_arguments_twice_so_they_are_refused_unparsed(self):
        as_logged = [SYSTEM, ASK, {**CALL, 'tool_calls': [call('call_1', 'read_file', '{"path": "a"}')]}, QUESTION]
        for name, written in (('llama-3.1', '"parameters": "{\\"path\\": \\"a\\"}"'),
                              ('qwen-2.5', '"arguments": "{\\"path\\": \\"a\\"}"')):
            with self.subTest(name):
                if template_path(name) is not None:
                    self.assertIn(written, official(name, as_logged))
                with self.assertRaisesRegex(CounterError, '^message 2, tool call 0: arguments must be a JSON'):
                    prompt_text(name, FORMS[name], as_logged)

    def test_llama_json_quotes_a_string_result_and_drops_the_text_beside_a_call(self):
        messages = [SYSTEM, ASK, {**CALL, 'content': 'Let me look.'}, {**RESULT, 'content': 'Line "1"\né'}, QUESTION]
        text = prompt_text('llama-3.1', FORMS['llama-3.1'], messages)
        self.assertIn('<|start_header_id|>ipython<|end_header_id|>\n\n"Line \\"1\\"\\né"<|eot_id|>', text)
        self.assertNotIn('Let me look.', text)
        self.assert_official('llama-3.1', messages, None, text)

    def test_llama_puts_the_tools_list_in_the_first_message_after_the_system_message_whatever_its_role(self):
        trimmed = [SYSTEM, RESULT, ANSWER, QUESTION]  # a trimmer dropped the first turn's user message and call
        text = prompt_text('llama-3.1', FORMS['llama-3.1'], trimmed, TOOLS)
        self.assertIn('}\n\nShip on Friday.<|eot_id|><|start_header_id|>assistant', text)
        self.assertNotIn('ipython<|end_header_id|>', text)
        self.assert_official('llama-3.1', trimmed, TOOLS, text)
        self.assertIsNone(turn_prompt_text('llama-3.1', FORMS['llama-3.1'], [ASK, CALL, RESULT], TOOLS))

    def test_llama_keeps_no_call_of_the_message_the_tools_list_takes_so_two_calls_there_do_not_raise(self):
        trimmed = [SYSTEM, PARALLEL[2], QUESTION]
        text = prompt_text('llama-3.1', FORMS['llama-3.1'], trimmed, TOOLS)
        self.assertIn('}\n\nReading both.<|eot_id|><|start_header_id|>user', text)
        self.assertNotIn('search', text)
        self.assert_official('llama-3.1', trimmed, TOOLS, text)

    def test_qwen_merges_consecutive_results_into_one_user_block(self):
        text = prompt_text('qwen-2.5', FORMS['qwen-2.5'], PARALLEL)
        self.assertEqual(text.count('<|im_start|>user\n<tool_response>'), 1)
        self.assertIn('</tool_response>\n<tool_response>\nA\n</tool_response><|im_end|>\n', text)

    def test_qwen_writes_its_default_system_text_when_there_is_none(self):
        default = 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.'
        for tools, after in ((None, '<|im_end|>\n'), (TOOLS, QWEN_TOOLS)):
            with self.subTest(tools=tools is not None):
                text = prompt_text('qwen-2.5', FORMS['qwen-2.5'], [QUESTION], tools)
                self.assertTrue(text.startswith('<|im_start|>system\n' + default + after), text)
                self.assert_official('qwen-2.5', [QUESTION], tools, text)

    def test_gemma_drops_a_result_whose_call_is_gone_and_leaves_the_turn_open_after_a_call_without_result(self):
        orphan = prompt_text('gemma-4-e2b', FORMS['gemma-4-e2b'], [SYSTEM, ASK, RESULT, ANSWER, QUESTION])
        self.assertNotIn('Ship on Friday.', orphan)
        open_call = prompt_text('gemma-4-e2b', FORMS['gemma-4-e2b'], [SYSTEM, ASK, CALL, QUESTION])
        self.assertIn('<tool_call|><|tool_response><|turn>user\nWhen do we ship?', open_call)
        self.assert_official('gemma-4-e2b', [SYSTEM, ASK, RESULT, ANSWER, QUESTION], None, orphan)
        self.assert_official('gemma-4-e2b', [SYSTEM, ASK, CALL, QUESTION], None, open_call)

    def test_gemma_writes_no_generation_prompt_after_a_request_that_ends_on_results(self):
        for messages, ending in (([ASK, CALL, RESULT], '<tool_response|>'),
                                 ([ASK, {**CALL, 'content': 'Done.'}, RESULT], '<tool_response|>Done.<turn|>\n')):
            text = prompt_text('gemma-4-e2b', FORMS['gemma-4-e2b'], messages)
            self.assertTrue(text.endswith(ending), text)
            self.assert_official('gemma-4-e2b', messages, None, text)

    def test_gemma_names_a_result_after_the_call_its_id_matches_not_after_its_own_name(self):
        messages = [ASK, CALL, {**RESULT, 'name': 'other'}, {**RESULT, 'tool_call_id': 'gone'}, QUESTION]
        text = prompt_text('gemma-4-e2b', FORMS['gemma-4-e2b'], messages)
        self.assertIn('response:read_file{value:<|"|>Ship on Friday.<|"|>}<tool_response|><|tool_response>'
                      'response:unknown{', text)
        self.assert_official('gemma-4-e2b', messages, None, text)

    def test_smollm2_is_graded_without_the_calls_its_template_drops(self):
        self.assertEqual(as_rendered('smollm2-135m', CHAT)[1:4], [ASK, {'role': 'assistant', 'content': ''}, RESULT])
        self.assertEqual(as_rendered('qwen-2.5', CHAT), CHAT)

    def test_phi_refuses_tools_because_its_template_drops_them(self):
        if template_path('phi-3.5') is not None:
            self.assertNotIn('Ship on Friday.', official('phi-3.5', CHAT))
            with self.assertRaises(TypeError):  # OpenAI's null content on a call message
                official('phi-3.5', [SYSTEM, ASK, {**CALL, 'content': None}, QUESTION])
        for messages, tools in ((CHAT, None), ([SYSTEM, QUESTION], TOOLS)):
            with self.assertRaisesRegex(CounterError, 'drops every tool message and every tool_calls field'):
                prompt_text('phi-3.5', FORMS['phi-3.5'], messages, tools)

    def test_a_message_outside_the_format_is_refused_in_one_line_naming_its_index(self):
        for message, says in (({'role': 'tool', 'content': 'x'}, 'message 1: a tool message holds'),
                              ({'role': 'assistant', 'content': None}, 'message 1: content must be a string, got null'),
                              ({'role': 'tool', 'tool_call_id': '', 'content': 'x'},
                               'message 1: tool_call_id must be a non-empty string, got ""'),
                              ({**CALL, 'tool_calls': []}, 'message 1: tool_calls must be a non-empty list of calls'),
                              ({**CALL, 'tool_calls': [{'id': 'c', 'function': {}}]}, 'message 1, tool call 0: '),
                              ({'role': 'user', 'content': 'x', 'extra': 1}, 'message 1: a user message holds'),
                              (SYSTEM, 'message 1: a system message may only come first')):
            with self.subTest(says), self.assertRaises(CounterError) as caught:
                prompt_text('qwen-2.5', FORMS['qwen-2.5'], [ASK, message])
            self.assertTrue(str(caught.exception).startswith(says), str(caught.exception))

    def test_a_thinking_marker_is_refused_in_one_line_naming_where_as_the_caller_asks(self):
        with self.assertRaises(CounterError) as caught:
            refuse_thinking('cases.json: case c: field history[1].assistant', 'a <channel|>')
        self.assertEqual(str(caught.exception), "cases.json: case c: field history[1].assistant contains a "
                         "thinking-channel marker ['<|channel>', '<channel|>'], which the counter does not cover")
        self.assertRaises(LookupError, refuse_thinking, 'w', 'a <|channel>b', LookupError)  # a loader's own error
        self.assertIsNone(refuse_thinking('w', '<|turn> <|channel <channel>'))  # other markers are text

    def test_a_turn_that_does_not_start_with_its_one_user_message_is_refused(self):
        for turn in ([CALL, RESULT], [ASK, ANSWER, QUESTION], [SYSTEM, ASK], []):
            with self.assertRaisesRegex(CounterError, 'a turn is one user message|a system message'):
                turn_prompt_text('gemma-4-e2b', FORMS['gemma-4-e2b'], turn)


KEYS = st.one_of(st.sampled_from(['a', 'A', 'b', 'B', 'path', 'Path', '_', 'é', 'Z', 'z']), st.text(max_size=4))
JSON_FRAGMENTS = [' ', '\n', '\n\n', '\t', ' x ', 'é', '日本', '🦙', '"', '\\', '{', '}', '<|"|>', '<tool_call>',
             '<|im_end|>', '<turn|>', '<|eot_id|>', 'null', '0']
TEXT = st.lists(st.one_of(st.sampled_from(JSON_FRAGMENTS), st.text(max_size=8)), max_size=6).map(''.join)
ASSISTANT_TEXT = TEXT.filter(lambda text: not any(marker in text for marker in THINKING_MARKERS))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 40, 2 ** 40),
                    st.floats(allow_nan=False, allow_infinity=False), TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(KEYS, inner, max_size=3)), max_leaves=10)
FUNCTIONS = st.sampled_from(['read_file', 'search', 'Search', 'run'])
IDS = st.sampled_from(['call_1', 'call_2', 'call_3'])  # reused ids, as real logs reuse them
LEAF = st.fixed_dictionaries({'type': st.sampled_from(['string', 'integer', 'boolean', 'null', ['string', 'null']])},
                             optional={'description': TEXT, 'enum': st.lists(TEXT, max_size=2),
                                       'nullable': st.booleans(), 'default': st.one_of(st.none(), SCALARS)})
SCHEMAS = st.deferred(lambda: st.one_of(ARRAYS, OBJECTS, LEAF))
ARRAYS = st.fixed_dictionaries({'type': st.just('array'), 'items': SCHEMAS}, optional={'description': TEXT})
OBJECTS = st.fixed_dictionaries({'type': st.just('object')}, optional={
    'properties': st.dictionaries(KEYS, SCHEMAS, max_size=3), 'required': st.lists(KEYS, max_size=2),
    'additionalProperties': st.booleans()})
TOOL = st.builds(lambda name, extra: {'type': 'function', 'function': {'name': name, **extra}}, FUNCTIONS,
                 st.fixed_dictionaries({}, optional={'description': TEXT, 'parameters': st.one_of(st.fixed_dictionaries(
                     {'type': st.just('object'), 'properties': st.dictionaries(KEYS, SCHEMAS, min_size=1, max_size=3)},
                     optional={'required': st.lists(KEYS, max_size=2)}), OBJECTS)}))
TOOL_LISTS = st.one_of(st.lists(TOOL, min_size=1, max_size=2), st.just([]))  # and None, in every example


@st.composite
def turns(draw) -> list[dict]:
    """A user message, then assistant texts and calls, each call's results after it in any order."""
    messages = [{'role': 'user', 'content': draw(TEXT)}]
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            messages.append({'role': 'assistant', 'content': draw(ASSISTANT_TEXT)})
            continue
        calls = [call(draw(IDS), draw(FUNCTIONS), draw(st.dictionaries(KEYS, VALUES, max_size=4)))
                 for _ in range(draw(st.integers(1, 3)))]
        messages.append({'role': 'assistant', 'content': draw(st.one_of(st.just(''), ASSISTANT_TEXT)),
                         'tool_calls': calls})
        messages += draw(st.permutations([{'role': 'tool', 'tool_call_id': each['id'], 'content': draw(TEXT)}
                                          | ({'name': draw(FUNCTIONS)} if draw(st.booleans()) else {})
                                          for each in calls]))
    return messages


@st.composite
def agent_chats(draw) -> tuple[list[dict], list[list[dict]], dict, list[list[dict]]]:
    """(system part, whole turns, question), and the same messages as trimmers might leave them: some dropped,
    and cut off after any message."""
    system = [{'role': 'system', 'content': draw(TEXT)}] if draw(st.booleans()) else []
    history, question = draw(st.lists(turns(), max_size=3)), {'role': 'user', 'content': draw(TEXT)}
    messages = system + [message for turn in history for message in turn] + [question]
    dropped = draw(st.sets(st.integers(0, len(messages) - 1), max_size=3))
    cut = draw(st.integers(1, len(messages)))
    return system, history, question, [[message for index, message in enumerate(messages) if index not in dropped],
                                       messages[:cut]]


def rendered(render, *arguments) -> str:
    """The render, or 'refused' where the template raises (ours must raise a one-line CounterError then)."""
    try:
        return render(*arguments)
    except CounterError as error:
        if '\n' in str(error):
            raise AssertionError(f'a refusal of more than one line: {error}') from None
    except TemplateError:
        pass
    return 'refused'


ANY_TEMPLATE = unittest.skipUnless(any(map(template_path, TOOL_FAMILIES)), 'no official template with tools is at hand')


class GeneratedChatsTest(ToolFormatTest):
    @ANY_TEMPLATE
    @settings(max_examples=300, deadline=None, database=None)
    @given(st.lists(TOOL, min_size=1, max_size=3), st.booleans())
    def test_every_generated_tools_list_renders_as_the_official_template(self, tools, system):
        messages = [SYSTEM, QUESTION][0 if system else 1:]
        for name in TOOL_FAMILIES:
            if template_path(name) is not None:
                self.assertEqual(prompt_text(name, FORMS[name], messages, tools), official(name, messages, tools))

    @ANY_TEMPLATE
    @MANY_EXAMPLES
    @given(agent_chats(), TOOL_LISTS)
    def test_every_generated_agent_chat_valid_or_trimmed_renders_as_the_official_template(self, chat, tools):
        system, history, question, trimmed = chat
        whole = system + [message for turn in history for message in turn] + [question]
        for name in TOOL_FAMILIES:
            if template_path(name) is None:
                continue
            for messages, listed in itertools.product([whole, *trimmed], (None, tools)):
                if messages:
                    self.assertEqual(rendered(prompt_text, name, FORMS[name], messages, listed),
                                     rendered(official, name, messages, listed), name)

    @MANY_EXAMPLES
    @given(agent_chats(), TOOL_LISTS)
    def test_turn_texts_sum_to_the_prompt_wherever_they_are_given(self, chat, tools):
        system, history, question, _ = chat
        for name, listed in itertools.product(TOOL_FAMILIES, (None, tools)):
            form = FORMS[name]
            texts = [rendered(turn_prompt_text, name, form, turn, listed) for turn in [*history, [question]]]
            if None in texts:
                self.assertTrue(name.startswith('llama-') and listed is not None, name)
                continue
            # What the counter keeps of a turn (turn_costs, rendered without tools) holds for any tools list.
            self.assertEqual(texts, [rendered(turn_prompt_text, name, form, turn) for turn in [*history, [question]]])
            whole = rendered(prompt_text, name, form, system + [m for turn in history for m in turn] + [question],
                             listed)
            if 'refused' in texts or whole == 'refused':  # Llama on parallel calls: refused both ways
                self.assertEqual('refused', whole, name)
                continue
            short = prompt_text(name, form, system + [question], listed)
            tail = texts[-1] + form['suffix']
            self.assertTrue(short.endswith(tail), name)
            self.assertEqual(whole, short[:-len(tail)] + ''.join(texts) + form['suffix'], name)


if __name__ == '__main__':
    unittest.main()
