"""Turn your own OpenAI-format chat logs into an agent case set: one case per labelled question.

    .venv/bin/python chat_cases.py logs.jsonl --labels labels.json --output my-cases.json
    .venv/bin/python evaluate.py --cases my-cases.json

LOGS holds conversations, each an object with `messages` (the OpenAI chat format) and optionally `tools` (function
schemas); other keys, such as an id, are ignored. It is a JSON list of them if its first character past JSON
whitespace is `[`, else JSONL: conversation N on line N + 1 (so a blank line, which would shift every index after it,
is refused). LABELS is a JSON list of labels, each exactly {"id", "conversation", "message", "split", "kind",
"budget", "required", "stale"}: conversation and message are the 0-based indexes of a conversation in LOGS and of the
user message in it that asks the question. A label's case has, in place of the two indexes, "messages": the
conversation's up to and including that one, copied exactly (the first must be the system message), and its "tools"
if it has them. The cases are written whole, indented, in label order: the same input gives the same bytes. Bad input
is one line naming the file, the line or index and the field, exit 2, nothing written; the output is never an input.
It counts no tokens and checks neither messages nor facts: the loader does. docs/agents.md shows a labels file.
"""
import argparse
import json
from pathlib import Path

from case_set import AGENT_CASE, CaseError, check_encodable
from common import run  # standard library only, as are the two below
from lab_files import (ANY, COUNT, check_fields, check_outputs, file_identity, output_help, parse_json, read_json,
                       read_text, to_json, write_output)

# A conversation's fields read (any other, such as an id, is ignored), and a label's (each checked in this order).
CONVERSATION = {'messages': (lambda v: isinstance(v, list), 'a list of messages'), 'tools': ANY}
INDEX = (COUNT[0], 'a 0-based index')  # conversation and message: what only this step sees
LABEL = {'id': ANY, 'conversation': INDEX, 'message': INDEX, 'split': ANY, 'kind': ANY, 'budget': ANY, 'required': ANY,
         'stale': ANY}
JSON_SPACE = ' \t\n\r'  # the whitespace JSON allows between values; str.strip() would also take U+2028 and more


def conversations(path: Path) -> list[tuple[str, dict]]:
    """(where, conversation) for each conversation of LOGS, in order; `where` names the file and line or index."""
    text = read_text(path, 'log file')[0]
    found = []
    if text.lstrip(JSON_SPACE).startswith('['):
        found = [(f'{path}: index {index}', item) for index, item in enumerate(parse_json(text, str(path), 'log file'))]
    else:
        lines = text.split('\n')  # not splitlines(): a JSON string may hold U+2028, where it would split too
        if not lines[-1].strip(JSON_SPACE):
            lines.pop()  # what follows the last line's newline
        for number, line in enumerate(lines, 1):
            where = f'{path}: line {number}'
            if not line.strip(JSON_SPACE):
                raise CaseError(f'{where}: is blank; JSONL holds one conversation a line, conversation N on line N + 1')
            found.append((where, parse_json(line, where, 'log file', line=False)))
    if not found:
        raise CaseError(f'{path}: holds no conversation')
    for where, conversation in found:
        check_fields(where, conversation, CONVERSATION, optional=['tools'], exact=False, error=CaseError)
        check_written(where, conversation, [name for name in ('messages', 'tools') if name in conversation])
    return found


def labels_of(path: Path) -> list[tuple[str, dict]]:
    """(where, label) for each label of LABELS, checked for what the loader will not see: the indexes."""
    labels = read_json(path, 'labels file')
    if not isinstance(labels, list) or not labels:
        raise CaseError(f'{path}: expected a non-empty list of labels')
    found, seen = [], set()
    for index, label in enumerate(labels):
        where = f'{path}: label at index {index}'
        check_written(where, check_fields(where, label, LABEL, error=CaseError), LABEL)
        if isinstance(label['id'], str) and label['id'] in seen:  # any other id is the loader's to refuse
            raise CaseError(f'{where}: field id {label["id"]!r} repeats an earlier label; every case id is unique')
        seen.add(label['id'] if isinstance(label['id'], str) else None)
        found.append((where, label))
    return found


def check_written(where: str, item: dict, fields) -> None:
    """Refuse, naming the field, a lone surrogate (JSON's "\\ud800") in a field the case set will hold: no UTF-8
    file can hold it."""
    check_encodable(where, [(name, json.dumps(item[name], ensure_ascii=False)) for name in fields])


def role(message) -> object:
    return message.get('role') if isinstance(message, dict) else None


def case_of(where: str, label: dict, logs: Path, found: list[tuple[str, dict]]) -> dict:
    """The case one label asks for, its fields in the loader's order (case_set.AGENT_CASE)."""
    if label['conversation'] >= len(found):
        raise CaseError(f'{where}: field conversation is {label["conversation"]}, but {logs} holds '
                        f'{len(found)} conversations (indexes from 0)')
    at, conversation = found[label['conversation']]
    messages, index = conversation['messages'], label['message']
    if index >= len(messages):
        raise CaseError(f'{where}: field message is {index}, but conversation {label["conversation"]} holds '
                        f'{len(messages)} messages (indexes from 0)')
    if role(messages[0]) != 'system':
        raise CaseError(f'{at}: field messages[0] must be a system message, which a case starts with; its role is '
                        f'{role(messages[0])!r}')
    if role(messages[index]) != 'user':
        raise CaseError(f'{where}: field message: messages[{index}] of conversation {label["conversation"]} must be '
                        f'a user message, since it asks the question; its role is {role(messages[index])!r}')
    case = {**label, 'messages': messages[:index + 1], 'tools': conversation.get('tools')}
    return {name: case[name] for name in AGENT_CASE if name != 'tools' or 'tools' in conversation}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Convert OpenAI-format chat logs and their labels into a case set.')
    parser.add_argument('logs', type=Path, help='the logs: a JSON list of conversations, or JSONL, one a line')
    parser.add_argument('--labels', type=Path, required=True, help='a JSON list of labels, one per question')
    parser.add_argument('--output', type=Path, required=True,
                        help=output_help('case set to write', 'the logs or the labels'))
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    check_outputs([('--output', args.output)], [('the logs', args.logs), ('--labels', args.labels)])
    if len(identity := file_identity(args.logs) or ()) == 2 and identity == file_identity(args.labels):
        raise CaseError(f'--labels {args.labels}: the same file as the logs {args.logs}; the labels are a file '
                        'of their own')
    found = conversations(args.logs)
    cases = [case_of(where, label, args.logs, found) for where, label in labels_of(args.labels)]
    write_output(args.output, to_json(cases), 'case set')
    return 0


if __name__ == '__main__':
    run(main, 'nothing was written', packages=False)
