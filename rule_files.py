"""Rules from a user's file, run beside the four in a process of their own: the plug-in contract of
`evaluate.py --rules FILE.py`.

    .venv/bin/python evaluate.py --rules my_rules.py --format table
    .venv/bin/python evaluate.py --rules field_rules.py --rules my_rules.py --show dev-correction --strategy mine

A rules file defines RULES, a dict of name -> function(case, count) returning the request it would send. The files
are imported, and their rules run, in one child process per run (`serve`): it is sent label-free copies of the
cases, each conversation once; its `count` asks the lab's counter; it answers in plain JSON. The lab counts what
comes back itself, finds the history turns it carries and grades it like the four, over budget or not. Whatever
goes wrong (an exception of any kind, an exit, a reply out of shape, a rule past its time limit) is one RuleError
naming file, rule and case. The contract in full: docs/rules.md. This module writes nothing; what a rule prints
goes to stderr after the file's and the rule's name.
"""
from collections.abc import Callable
import contextlib
import hashlib
import importlib.machinery
import importlib.util
import io
from itertools import count as numbers
import json
import math
from operator import itemgetter
import os
from pathlib import Path
import queue
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
import weakref

from best_possible import LABEL
from case_set import CASE_FIELDS
from common import LabError
from strategies import RULES as BUILT_IN
from tokenizer import CounterError

RULE_TIMEOUT = 60.0  # seconds a rule may take on one case (and a file to import) unless --rule-timeout says
START_LIMIT = 60.0  # seconds the rules process may take to import the lab's own modules
LABELS = ('required', 'stale')  # what a rule never sees
VISIBLE = tuple(name for name in CASE_FIELDS if name not in (*LABELS, 'history'))  # sent as they are
RESERVED = frozenset(name.casefold() for name in (*BUILT_IN, 'best possible', LABEL))  # names a rule may not take
MODULE_PREFIX = 'context_lab_rules_'  # + a number: each file's own module name in the rules process
CHILD = f'import sys; sys.path[0] = {str(Path(__file__).resolve().parent)!r}; import rule_files; rule_files.serve()'
TURN_TEXTS = itemgetter('user', 'assistant')
_module_numbers = numbers(1)  # one module name per import, never reused
_children = weakref.WeakSet()  # this process's rules processes, for child_cpu


class RuleError(LabError):
    """A rules file or one of its rules cannot be run; the message names the file, rule and case."""


def describe(error: BaseException, path: Path) -> str:
    """An exception in one line, with the last line of the rules file it passed (the rule's own line, even when
    it came from deeper down): 'ZeroDivisionError: division by zero (line 3 of r.py)'."""
    try:
        where = str(path.resolve())
        lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__) if frame.filename == where]
        lines += [error.lineno] if isinstance(error, SyntaxError) and error.filename == where else []
        text = ' '.join(str(error).split())
        return (f'{type(error).__name__}: {text}' if text else type(error).__name__) \
            + (f' (line {lines[-1]} of {path.name})' if lines else '')
    except BaseException:  # its __str__ raised too
        return 'an exception that cannot be shown'


def shown(text) -> str:
    """Text from the rules process as one printable line: shown('a\\nb') -> 'a\\\\nb'."""
    return ''.join(char if char.isprintable() else ascii(char)[1:-1] for char in str(text))


def import_file(path: Path) -> list[tuple[str, Callable]]:
    """The RULES a file defines, imported as a module of a fresh name (the process writes no bytecode)."""
    name = f'{MODULE_PREFIX}{next(_module_numbers)}'
    loader = importlib.machinery.SourceFileLoader(name, str(path.resolve()))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    sys.modules[name] = module  # some code (dataclasses, pickle) looks its module up by name
    try:
        loader.exec_module(module)
    except BaseException as error:  # anything the file's own code raises, or exits with, is the file's fault
        raise RuleError(f'cannot import it: {describe(error, path)}') from None
    rules = getattr(module, 'RULES', None)
    if not isinstance(rules, dict):
        raise RuleError('expected RULES, a dict of name -> function(case, count); found '
                        + ('none' if rules is None else type(rules).__name__))
    try:
        found = list(rules.items())
    except BaseException as error:  # a dict whose items() raises
        raise RuleError(f'cannot read its RULES: {describe(error, path)}') from None
    for name, function in found:
        if not isinstance(name, str) or not callable(function):
            raise RuleError(f'RULES: expected names of functions(case, count), got {name!r}: '
                            f'{type(function).__name__}')
    return found


class Labelled(io.TextIOBase):
    """sys.stdout and sys.stderr of the rules process: each line goes to stderr after `label`."""
    label, fresh, encoding, path = '', True, 'utf-8', Path()

    def write(self, text: str) -> int:
        for line in str.splitlines(text, True):  # a text that is no str raises, as any file's write does
            os.write(2, ((self.label if self.fresh else '') + line).encode('utf-8', 'backslashreplace'))
            self.fresh = line.endswith(('\n', '\r'))
        return len(text)


class RemoteCount:
    """The `count` a rule gets in the rules process: the lab's counter, asked through the pipe. Each answer is
    kept for the call (a rule counts its bare request more than once), turn costs for the conversation."""

    def __init__(self, send: Callable[[str], None], inbox: queue.SimpleQueue):
        self.send, self.inbox, self.counts, self.turns = send, inbox, {}, {}

    def ask(self, what: str, sent: str):
        self.send(f'{{"{what}": {sent}}}')
        answer = json.loads(self.inbox.get())
        if 'error' in answer:
            raise CounterError(answer['error'])
        return answer['answer']

    def __call__(self, messages: list[dict]) -> int:
        if (key := json.dumps(messages)) not in self.counts:
            self.counts[key] = self.ask('count', key)
        return self.counts[key]

    def turn_costs(self, history: list[dict]) -> list[int]:
        if (key := tuple(map(TURN_TEXTS, history))) not in self.turns:
            self.turns = {key: self.ask('turn_costs', json.dumps(key))}
        return list(self.turns[key])


def serve() -> None:
    """The rules process: import files and run their rules on label-free cases, one request at a time."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the lab's to handle; it then ends this process
    inbox, replies = queue.SimpleQueue(), os.fdopen(os.dup(1), 'w', encoding='ascii')
    threading.Thread(target=watch, args=(os.fdopen(os.dup(0), 'rb'), inbox), daemon=True).start()
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # a rule reading stdin reads nothing,
    os.dup2(2, 1)  # and one writing to fd 1 writes to stderr
    sys.stdout = sys.stderr = out = Labelled()
    rules, histories, reply = [], {}, '{"ready": true}'
    count = RemoteCount(lambda line: (replies.write(line + '\n'), replies.flush()), inbox)
    while True:
        count.send(reply)  # JSON's ASCII form: a lone surrogate travels escaped, for the lab to refuse
        try:
            reply = answer(json.loads(inbox.get()), rules, histories, out, count)
        except RuleError as error:
            reply = json.dumps({'error': str(error)})
        except BaseException as error:  # the file's code ran where the lab reads it (a module's __getattr__, ...)
            reply = json.dumps({'error': f'failed: {describe(error, out.path)}'})


def watch(pipe, inbox: queue.SimpleQueue) -> None:
    """Pass the lab's lines on; when the lab is gone (even killed), end the process, looping rule and all."""
    for line in pipe:
        inbox.put(line)
    os._exit(0)


def answer(request: dict, rules: list, histories: dict, out: Labelled, count: RemoteCount) -> str:
    """The reply to one request, as JSON text: a file's rule names, or the request a rule sends for a case."""
    if 'load' in request:
        out.path = path = Path(request['load'])
        sys.path.insert(0, str(path.resolve().parent))  # a helper module beside the file can be imported
        out.label = f'{path}: '
        found = import_file(path)
        rules += [(path, name, function) for name, function in found]
        return json.dumps({'names': [name for name, _ in found]})
    if 'turns' in request:  # a conversation not sent before
        histories[request['history']] = [{'user': user, 'assistant': reply} for user, reply in request['turns']]
    out.path, name, function = rules[request['rule']]
    out.label, count.counts = f'{out.path}: rule {name}: ', {}
    case = dict(request['case'], history=list(map(dict.copy, histories[request['history']])))  # its own copy
    try:
        returned = function(case, count)
        messages = returned.get('messages') if isinstance(returned, dict) else returned
    except BaseException as error:
        raise RuleError(f'the rule raised {describe(error, out.path)}') from None
    if not isinstance(messages, list):
        got = 'a dict without a messages list' if isinstance(returned, dict) else type(returned).__name__
        raise RuleError(f"returned {got}; expected a list of chat messages ({{'role', 'content'}}) or a dict with "
                        "'messages'")
    try:
        return json.dumps({'messages': messages, 'cpu': time.process_time()})
    except BaseException as error:
        raise RuleError(f'returned what JSON cannot carry: {describe(error, out.path)}') from None


def end(process: subprocess.Popen) -> int:
    """Stop a rules process, whatever it is doing; its exit status."""
    process.kill()
    with contextlib.suppress(OSError):  # a request it never read
        process.stdin.close()
    process.stdout.close()
    return process.wait()


class Child:
    """The lab's side of one rules process: it asks one thing at a time and checks every reply."""

    def __init__(self, timeout: float):
        self.timeout, self.cpu, self.rules, self.histories, self.buffer = timeout, 0.0, 0, {}, bytearray()
        self.process = subprocess.Popen([sys.executable, '-B', '-c', CHILD], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE)
        self.stop = weakref.finalize(self, end, self.process)  # at the latest when this process ends
        _children.add(self)
        self.ask(None, 'starting the rules process', START_LIMIT)

    def ask(self, request: dict | None, where: str, limit: float = 0, count=None) -> dict:
        """The reply to a request (None: the first reply), answering the rule's counts on the way; or RuleError."""
        limit = limit or self.timeout
        deadline = time.monotonic() + limit
        while True:
            try:
                if request is not None:
                    self.process.stdin.write(json.dumps(request).encode() + b'\n')
                    self.process.stdin.flush()
                while (end_of_line := self.buffer.find(b'\n')) < 0:
                    if not select.select([self.process.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                        self.stop()
                        raise RuleError(f'{where}: still running after {limit:g} s (--rule-timeout SECONDS sets '
                                        'the limit per case)')
                    if not (chunk := os.read(self.process.stdout.fileno(), 1 << 20)):
                        break
                    self.buffer += chunk
            except OSError:  # it is gone and cannot read
                end_of_line = -1
            if end_of_line < 0:
                raise RuleError(f'{where}: the rules process ended (exit status {self.stop()}) without answering')
            reply = parsed(self.buffer[:end_of_line], where)
            del self.buffer[:end_of_line + 1]
            if count is None or not {'count', 'turn_costs'} & set(reply):
                break
            request = counted(reply, count, where)
        if type(reply.get('cpu')) is float:
            self.cpu = max(self.cpu, reply['cpu'])
        return reply

    def rule(self, path: Path, name: str) -> Callable[[dict, Callable], dict]:
        """A rule of the file as the lab runs it: (case, count) -> what a built-in rule returns."""
        index, self.rules = self.rules, self.rules + 1

        def rule(case: dict, count) -> dict:
            where = f'{path}: rule {name}: case {case["id"]}'
            history = case['history']
            request = {'rule': index, 'case': {key: case[key] for key in VISIBLE}}
            known = self.histories.get(id(history))
            if known is None or known[0] is not history:  # kept, so its id cannot be reused while remembered
                places: dict[tuple, list[int]] = {}
                for turn, pair in enumerate(map(TURN_TEXTS, history)):
                    places.setdefault(pair, []).append(turn)
                known = self.histories[id(history)] = history, len(self.histories), places
                request['turns'] = list(map(TURN_TEXTS, history))
            request['history'] = known[1]
            messages = self.ask(request, where, count=count).get('messages')
            try:
                size = count(text_only(messages))  # the lab's count; whatever the rule said about its size is not read
            except LabError as error:
                raise RuleError(f'{where}: returned a request the counter does not accept: {error}') from None
            return {'messages': messages, 'turns': carried_turns(history, messages, known[2]), 'notes': 0,
                    'input_tokens': size}
        rule.__name__ = rule.__qualname__ = name
        return rule


def parsed(line: bytes, where: str) -> dict:
    """One reply of the rules process: a JSON object, or RuleError naming `where` (with the error it reports)."""
    try:
        reply = json.loads(line.decode('utf-8'))
    except (ValueError, RecursionError):
        reply = None
    if not isinstance(reply, dict):
        raise RuleError(f'{where}: the rules process sent a reply that is not a JSON object')
    if 'error' in reply:
        raise RuleError(f'{where}: {shown(reply["error"])}')
    return reply


def counted(asked: dict, count, where: str) -> dict:
    """The lab's answer to a rule that counts: the lab's counter on what it sent (a request, or a history)."""
    try:
        if 'count' in asked:
            return {'answer': count(text_only(asked['count']))}
        turns = asked['turn_costs']
        if not isinstance(turns, list) or not all(isinstance(pair, list) and len(pair) == 2
                                                  and all(type(text) is str for text in pair) for pair in turns):
            raise CounterError('turn_costs: expected a list of turns, each {"user": text, "assistant": text}')
        return {'answer': count.turn_costs(text_only([dict(zip(('user', 'assistant'), pair)) for pair in turns]))}
    except LabError as error:
        return {'error': str(error)}


def text_only(messages) -> list:
    """The messages as sent, or CounterError naming one whose text holds a lone surrogate (JSON can carry one)."""
    for index, message in enumerate(messages if isinstance(messages, list) else ()):
        for text in message.values() if isinstance(message, dict) else ():
            try:
                isinstance(text, str) and not text.isascii() and text.encode('utf-8')  # isascii() is O(1)
            except UnicodeEncodeError:
                raise CounterError(f'message {index}: its text holds a lone surrogate, which is not text') from None
    return messages


def carried_turns(history: list[dict], messages: list[dict], where: dict | None = None) -> list[int]:
    """Indices of the history turns a request carries as adjacent (user, assistant) pairs of the same text.

    With history [A, B, A] (turns 0 and 2 alike), messages [system, A.user, A.assistant, B.user, question]
    give [0]: A takes the earliest free copy, B's user message alone is no turn. Sending A twice gives [0, 2].
    `where` maps each (user, assistant) pair to its indices, for a caller that has it already.
    """
    if where is None:
        where = {}
        for index, pair in enumerate(map(TURN_TEXTS, history)):
            where.setdefault(pair, []).append(index)
    taken, position = set(), 0
    while position < len(messages) - 1:
        first, second = messages[position], messages[position + 1]
        pair = (first['content'], second['content'])
        if first['role'] == 'user' and second['role'] == 'assistant' and pair in where:
            taken.update([index for index in where[pair] if index not in taken][:1])
            position += 1  # past the pair's user message; the line below passes its assistant message
        position += 1
    return sorted(taken)


def check_name(path: Path, name) -> str:
    """The name as names are compared (casefolded), or RuleError if it could pass for another row or forge one."""
    if not isinstance(name, str) or not name or not name.isprintable() or '|' in name \
            or name != ' '.join(name.split()):
        raise RuleError(f'{path}: rule {name!r}: a rule name must be printable text without "|", with single '
                        'spaces between words and none at the ends')
    if name.casefold() in RESERVED:
        raise RuleError(f'{path}: rule {name}: the name is taken by the lab, ignoring case (built-in rules: '
                        f'{", ".join(BUILT_IN)}; and best possible)')
    return name.casefold()


def load_rule_files(paths: list, timeout: float = RULE_TIMEOUT) -> tuple[dict[str, Callable], list[dict]]:
    """(rules by name, in file order then each file's order; [{'file': name, 'sha256': hex}] per file)."""
    rules, origin, files = {}, {}, []
    for path in map(Path, paths):
        if not path.is_file():
            raise RuleError(f'{path}: no such rules file')
    child = Child(timeout) if paths else None
    for path in map(Path, paths):
        names = child.ask({'load': str(path)}, str(path)).get('names')
        for name in names if isinstance(names, list) else [None]:
            if (key := check_name(path, name)) in origin:
                raise RuleError(f'{path}: rule {name}: the name is taken by a rule of {origin[key]}')
            rules[name], origin[key] = child.rule(path, name), path
        files.append({'file': path.name, 'sha256': hashlib.sha256(path.read_bytes()).hexdigest()})
    return rules, files


def child_cpu() -> float:
    """CPU seconds the living rules processes have reported so far (benchmark.py adds them to its own)."""
    return sum(child.cpu for child in _children)


def seconds(text: str) -> float:
    """--rule-timeout's value: a positive, finite number of seconds; argparse refuses the rest in one line."""
    if not 0 < (value := float(text)) < math.inf:
        raise ValueError(text)
    return value


def add_timeout_option(parser) -> None:
    parser.add_argument('--rule-timeout', type=seconds, default=RULE_TIMEOUT, metavar='SECONDS',
                        help='stop the run when a rules file takes longer than this to import, or one of its rules '
                             f'on one case (default {RULE_TIMEOUT:g})')
