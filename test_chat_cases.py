"""Tests for chat_cases.py, the conversion of OpenAI-format chat logs and their labels into a case set.

    .venv/bin/python -m unittest -v test_chat_cases

Each test is named after the failure it pins. The expected case set and every refusal are written out by hand;
files are only ever written into temporary folders.
"""
import contextlib
import io
import json
import os
from pathlib import Path
import tempfile

from case_set import load_cases
import chat_cases
from test_support_fixtures import TempFolderTest
from test_support_runs import in_process

BUILD = {'id': 'c-1', 'messages': [
    {'role': 'system', 'content': 'You are a build bot.'},
    {'role': 'user', 'content': 'Is the build green?'},
    {'role': 'assistant', 'content': None, 'tool_calls': [
        {'id': 'call_1', 'type': 'function', 'function': {'name': 'ci_status', 'arguments': '{"branch": "main"}'}}]},
    {'role': 'tool', 'tool_call_id': 'call_1', 'content': 'main: failed at step lint'},
    {'role': 'assistant', 'content': 'No: lint failed.'},
    {'role': 'user', 'content': 'Which step failed?'},
    {'role': 'assistant', 'content': 'lint'}]}
EDIT = {'tools': [{'type': 'function', 'function': {'name': 'read_file'}}], 'messages': [
    {'role': 'system', 'content': 'You edit files.'},
    {'role': 'user', 'content': 'Open notes.txt'},
    {'role': 'assistant', 'content': '', 'tool_calls': [
        {'id': 'c9', 'type': 'function', 'function': {'name': 'read_file', 'arguments': {'path': 'notes.txt'}}}]},
    {'role': 'tool', 'tool_call_id': 'c9', 'name': 'read_file', 'content': 'café\u2028port 8080'},
    {'role': 'user', 'content': 'Which port?'}]}
LABEL_BUDGET = {'context_limit': 384, 'max_new_tokens': 96, 'margin': 32}  # the budget of each case LABELS makes
LABELS = [{'id': 'green', 'conversation': 0, 'message': 5, 'split': 'dev', 'kind': 'tool-result',
           'budget': LABEL_BUDGET, 'required': ['failed at step lint'], 'stale': []},
          {'id': 'port', 'conversation': 1, 'message': 4, 'split': 'held_out', 'kind': 'tools', 'budget': LABEL_BUDGET,
           'required': ['port 8080'], 'stale': ['café']}]
# What the two labels give, worked out by hand: the messages up to each labelled one, as they came.
EXPECTED = '''[
  {
    "id": "green",
    "split": "dev",
    "kind": "tool-result",
    "messages": [
      {
        "role": "system",
        "content": "You are a build bot."
      },
      {
        "role": "user",
        "content": "Is the build green?"
      },
      {
        "role": "assistant",
        "content": null,
        "tool_calls": [
          {
            "id": "call_1",
            "type": "function",
            "function": {
              "name": "ci_status",
              "arguments": "{\\"branch\\": \\"main\\"}"
            }
          }
        ]
      },
      {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "main: failed at step lint"
      },
      {
        "role": "assistant",
        "content": "No: lint failed."
      },
      {
        "role": "user",
        "content": "Which step failed?"
      }
    ],
    "budget": {
      "context_limit": 384,
      "max_new_tokens": 96,
      "margin": 32
    },
    "required": [
      "failed at step lint"
    ],
    "stale": []
  },
  {
    "id": "port",
    "split": "held_out",
    "kind": "tools",
    "messages": [
      {
        "role": "system",
        "content": "You edit files."
      },
      {
        "role": "user",
        "content": "Open notes.txt"
      },
      {
        "role": "assistant",
        "content": "",
        "tool_calls": [
          {
            "id": "c9",
            "type": "function",
            "function": {
              "name": "read_file",
              "arguments": {
                "path": "notes.txt"
              }
            }
          }
        ]
      },
      {
        "role": "tool",
        "tool_call_id": "c9",
        "name": "read_file",
        "content": "café\u2028port 8080"
      },
      {
        "role": "user",
        "content": "Which port?"
      }
    ],
    "tools": [
      {
        "type": "function",
        "function": {
          "name": "read_file"
        }
      }
    ],
    "budget": {
      "context_limit": 384,
      "max_new_tokens": 96,
      "margin": 32
    },
    "required": [
      "port 8080"
    ],
    "stale": [
      "café"
    ]
  }
]
'''


def jsonl(*conversations) -> str:
    """Conversations one a line, non-ASCII kept as it is (so a U+2028 inside a string is the raw character)."""
    return ''.join(json.dumps(conversation, ensure_ascii=False) + '\n' for conversation in conversations)


class ChatCasesTest(TempFolderTest):
    def convert(self, logs: str, labels, name: str = 'logs.jsonl', *extra: str):
        """Write the logs and labels into a new folder, run the script on them: (result, logs, labels, output)."""
        self.folder = Path(tempfile.mkdtemp(dir=self.tmp))
        paths = self.folder / name, self.folder / 'labels.json', self.folder / 'cases.json'
        paths[0].write_text(logs, encoding='utf-8')
        paths[1].write_text(json.dumps(labels), encoding='utf-8')
        extra = [option.format(logs=paths[0]) for option in extra]
        result = in_process(chat_cases, str(paths[0]), '--labels', str(paths[1]), '--output', str(paths[2]), *extra)
        return result, *paths

    def refused(self, logs: str, labels, message: str, name: str = 'logs.jsonl', *extra: str) -> None:
        """The run exits 2 with the one line `message` ({logs} and {labels} stand for their paths), writing nothing."""
        result, logs_path, labels_path, _ = self.convert(logs, labels, name, *extra)
        line = message.format(logs=logs_path, labels=labels_path)
        self.assertEqual((result.returncode, result.stdout, result.stderr), (2, '', f'chat_cases.py: {line}\n'))
        self.assertEqual(sorted(os.listdir(self.folder)), sorted([name, 'labels.json']))
        self.assertEqual(logs_path.read_text(encoding='utf-8'), logs)

    def test_jsonl_logs_become_the_cases_their_labels_ask_for_byte_for_byte(self):
        result, _, _, output = self.convert(jsonl(BUILD, EDIT), LABELS)
        self.assertEqual((result.returncode, result.stdout, result.stderr), (0, '', ''))
        self.assertEqual(output.read_text(encoding='utf-8'), EXPECTED)

    def test_the_cases_it_writes_are_agent_cases_the_lab_loads(self):
        output = self.convert(jsonl(BUILD, EDIT), LABELS)[3]
        with contextlib.redirect_stderr(io.StringIO()) as stderr:
            cases = load_cases(output)
        self.assertEqual([(case['id'], len(case['history']), case['current']) for case in cases],
                         [('green', 1, 'Which step failed?'), ('port', 1, 'Which port?')])
        # EDIT's one tool result states the stale 'café' beside the required 'port 8080'
        self.assertEqual(stderr.getvalue(), f"{output}: case port: warning: stale fact 'café' is quoted again in "
                         "history turn 0, which states the required fact 'port 8080': every request carrying that "
                         'turn sends both (docs/agents.md)\n')

    def test_a_json_list_of_the_same_conversations_gives_the_same_bytes(self):
        logs = '\ufeff\n ' + json.dumps([BUILD, EDIT], indent=2)  # a byte-order mark and space before the [
        result, _, _, output = self.convert(logs, LABELS, 'logs.json')
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(output.read_text(encoding='utf-8'), EXPECTED)

    def test_a_label_on_the_first_user_message_keeps_the_system_message_and_the_tools(self):
        label = {**LABELS[1], 'message': 1}
        result, _, _, output = self.convert(jsonl(BUILD, EDIT), [label])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(json.loads(output.read_text(encoding='utf-8')), [
            {'id': 'port', 'split': 'held_out', 'kind': 'tools',
             'messages': [{'role': 'system', 'content': 'You edit files.'}, {'role': 'user', 'content': 'Open notes.txt'}],
             'tools': [{'type': 'function', 'function': {'name': 'read_file'}}], 'budget': LABEL_BUDGET,
             'required': ['port 8080'], 'stale': ['café']}])

    def test_logs_that_are_not_conversations_are_one_line_naming_the_line_or_index(self):
        for logs, name, message in [
                (jsonl(BUILD) + '{"messages": [}\n', 'logs.jsonl', '{logs}: line 2: invalid JSON at column 15: Expecting value'),
                ('[\n  {"messages": []}\n  {"messages": []}\n]\n', 'logs.json',
                 "{logs}: invalid JSON at line 3 column 3: Expecting ',' delimiter"),
                ('{"messages": [], "messages": []}\n', 'logs.jsonl',
                 "{logs}: line 1: key 'messages' appears twice in one object; a log file names each key once"),
                (jsonl(BUILD) + '\n' + jsonl(EDIT), 'logs.jsonl',
                 '{logs}: line 2: is blank; JSONL holds one conversation a line, conversation N on line N + 1'),
                (jsonl(BUILD, [1]), 'logs.jsonl',
                 "{logs}: line 2: must be an object with the fields ['messages', 'tools'] (tools optional), got [1]"),
                ('[{"id": "a", "messages": []}, {"id": "b"}]', 'logs.json', '{logs}: index 1: missing field messages'),
                (jsonl({'messages': 'Hi'}), 'logs.jsonl',
                 '{logs}: line 1: field messages must be a list of messages, got "Hi"'),
                ('', 'logs.jsonl', '{logs}: holds no conversation'),
                ('[]', 'logs.json', '{logs}: holds no conversation'),
                ('{"messages": [{"role": "system", "content": "\\ud800"}]}\n', 'logs.jsonl',
                 '{logs}: line 1: field messages holds a lone surrogate, which is not text')]:
            with self.subTest(message):
                self.refused(logs, LABELS, message, name)

    def test_a_label_naming_no_user_message_of_a_conversation_is_refused(self):
        no_system = {'messages': BUILD['messages'][1:]}
        for change, logs, message in [
                ({'conversation': 2}, jsonl(BUILD, EDIT),
                 '{labels}: label at index 0: field conversation is 2, but {logs} holds 2 conversations (indexes from 0)'),
                ({'message': 7}, jsonl(BUILD, EDIT),
                 '{labels}: label at index 0: field message is 7, but conversation 0 holds 7 messages (indexes from 0)'),
                ({'message': 4}, jsonl(BUILD, EDIT),
                 "{labels}: label at index 0: field message: messages[4] of conversation 0 must be a user message, "
                 "since it asks the question; its role is 'assistant'"),
                ({'message': 0}, jsonl(no_system),
                 "{logs}: line 1: field messages[0] must be a system message, which a case starts with; its role is "
                 "'user'")]:
            with self.subTest(message):
                self.refused(logs, [{**LABELS[0], **change}], message)

    def test_labels_of_the_wrong_shape_are_one_line_naming_the_label_and_field(self):
        fields = "['id', 'conversation', 'message', 'split', 'kind', 'budget', 'required', 'stale']"
        stale_missing = {name: value for name, value in LABELS[0].items() if name != 'stale'}
        for labels, message in [
                (LABELS[0], '{labels}: expected a non-empty list of labels'),
                ([], '{labels}: expected a non-empty list of labels'),
                ([LABELS[0], 'green'],
                 f'{{labels}}: label at index 1: must be an object with exactly the fields {fields}, got "green"'),
                ([{**LABELS[0], 'note': 'x'}],
                 f"{{labels}}: label at index 0: must be an object with exactly the fields {fields}; missing [], "
                 "unexpected ['note']"),
                ([stale_missing], f"{{labels}}: label at index 0: must be an object with exactly the fields {fields}; "
                                  "missing ['stale'], unexpected []"),
                ([{**LABELS[0], 'conversation': '0'}],
                 '{labels}: label at index 0: field conversation must be a 0-based index, got "0"'),
                ([{**LABELS[0], 'message': True}],
                 '{labels}: label at index 0: field message must be a 0-based index, got true'),
                ([{**LABELS[0], 'message': -1}], '{labels}: label at index 0: field message must be a 0-based index, got -1'),
                ([LABELS[0], {**LABELS[1], 'id': 'green'}],
                 "{labels}: label at index 1: field id 'green' repeats an earlier label; every case id is unique"),
                ([{**LABELS[0], 'required': ['\ud800']}],  # the case set written would hold it
                 '{labels}: label at index 0: field required holds a lone surrogate, which is not text')]:
            with self.subTest(message):
                self.refused(jsonl(BUILD, EDIT), labels, message)

    def test_the_output_or_the_labels_being_the_logs_is_refused_before_anything_is_read(self):
        self.refused(jsonl(BUILD, EDIT), LABELS, '--output {logs}: the same file as the logs {logs}, which this run '
                     'reads; write the output elsewhere', 'logs.jsonl', '--output', '{logs}')
        logs = Path(tempfile.mkdtemp(dir=self.tmp)) / 'logs.jsonl'
        logs.write_text(json.dumps(LABELS), encoding='utf-8')
        result = in_process(chat_cases, str(logs), '--labels', str(logs), '--output', str(logs.parent / 'cases.json'))
        self.assertEqual((result.returncode, result.stderr), (2, f'chat_cases.py: --labels {logs}: the same file as '
                                                                 f'the logs {logs}; the labels are a file of their own\n'))
        self.assertEqual(os.listdir(logs.parent), ['logs.jsonl'])

    def test_logs_that_are_a_named_pipe_are_refused_unread_instead_of_hanging(self):
        pipe, labels = self.tmp / 'logs.jsonl', self.tmp / 'labels.json'
        os.mkfifo(pipe)
        labels.write_text(json.dumps(LABELS), encoding='utf-8')
        result = in_process(chat_cases, str(pipe), '--labels', str(labels), '--output', str(self.tmp / 'cases.json'))
        self.assertEqual((result.returncode, result.stderr),
                         (2, f'chat_cases.py: {pipe}: the log file must be a file, not a named pipe\n'))
        self.assertFalse((self.tmp / 'cases.json').exists())
