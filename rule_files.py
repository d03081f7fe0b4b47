"""Rules from a user's file, run beside the four in a process of their own: `evaluate.py --rules FILE.py`.

    .venv/bin/python evaluate.py --rules field_rules.py --rules my_rules.py --show dev-correction --strategy mine

A rules file defines RULES, a dict of name -> function(case, count) returning the request it would send. One child
process per run (rules_process.py) runs them on label-free copies of the cases, `count` asking the lab's counter, and
answers in plain JSON, which the lab counts and grades itself. Whatever goes wrong is one RuleError naming file, rule
and case (docs/rules.md). It writes nothing; a rule's prints go to stderr, labelled. It keeps the labels out of a
rule's reach, not the file system: a rule is code run as the user.
"""
from collections.abc import Callable
import contextlib
import json
import os
from pathlib import Path
import re
import select
import signal
from subprocess import PIPE, Popen
import sys
import time
import traceback
import weakref

from best_possible import BEST, LABEL
from common import LabError, cut
from lab_files import path_text, sha256_file
from shapes import build_request, carried_turns, first_copies, is_agent, is_pair, selection, turn_key, \
    turn_messages, turn_places
from strategies import RULES as BUILT_IN, built as built_request
from text import printable
from tokenizer import CounterError

RULE_TIMEOUT = 60.0  # seconds a rule may take on one case (and a file to import) unless --rule-timeout says
VISIBLE = ('id', 'split', 'kind', 'instructions', 'current', 'budget', 'tools')  # with the history, all but labels
LOOK_ALIKE = str.maketrans('I10', 'llo')  # what many fonts draw alike, folded before rule names are compared
RESERVED = frozenset(name.translate(LOOK_ALIKE).casefold() for name in (*BUILT_IN, BEST, LABEL))
MARGIN = 1 << 20  # bytes a reply may hold beyond twice the case it answers: a request bigger is no choice of it
SHOWN = 400  # characters of a rule's message the rules process sends; the lab shows twice as many at most
CHILD = (f'import sys; sys.path[0] = {str(Path(__file__).resolve().parent)!r}; '
         'import rules_process; rules_process.serve()')  # the rules process (rules_process.py)
SURROGATE = re.compile(rb'\\u[dD][89a-fA-F]')  # JSON's escape of a surrogate; a lone one is no text
CHILDREN = weakref.WeakSet()  # this process's rules processes: benchmark.py adds the CPU each reports


class RuleError(LabError):
    """A rules file or one of its rules cannot be run; the message names the file, rule and case."""


def describe(error: BaseException, path: Path) -> str:
    """An exception in one line, with the last line of the rules file it passed: 'NameError: ... (line 3 of r.py)'."""
    try:
        frames = traceback.extract_tb(error.__traceback__) + ([error] if isinstance(error, SyntaxError) else [])
        lines = [frame.lineno for frame in frames if frame.filename == str(path.resolve())]
        text = cut(' '.join(str(error).split()), SHOWN)
        return (f'{type(error).__name__}: {text}' if text else type(error).__name__) \
            + (f' (line {lines[-1]} of {path.name})' if lines else '')
    except BaseException:  # its __str__ raised too
        return 'an exception that cannot be shown'


def end(process: Popen) -> int:  # a rules process stopped, with all it started, whatever they did: its exit status
    with contextlib.suppress(ProcessLookupError):  # all gone already
        os.killpg(process.pid, signal.SIGKILL)  # not communicate(), which waits for every holder of its pipes
    with contextlib.suppress(OSError):  # a request it never read
        process.stdin.close()
    process.stdout.close()
    return process.wait()


class Child:
    """The lab's side of one rules process: it asks one thing at a time and checks every reply."""

    def __init__(self, timeout: float):
        self.timeout, self.cpu, self.rules, self.histories, self.buffer = timeout, 0.0, 0, {}, bytearray()
        self.told = None, None, {}, 0  # the case and count last sent: what the request says of them, its JSON's size
        self.process = Popen([sys.executable, '-B', '-c', CHILD], stdin=PIPE, stdout=PIPE, start_new_session=True)
        self.stop = weakref.finalize(self, end, self.process)  # at the latest when this process ends
        CHILDREN.add(self)
        self.ask(None, 'starting the rules process')

    def ask(self, request: dict | None, where: str, count=None, most: int = MARGIN) -> dict:
        """The reply to a request (None: the first, once the lab's own modules are in, within the default limit),
        answering the rule's counts on the way, each line at most `most` bytes; or RuleError."""
        deadline = time.monotonic() + (limit := RULE_TIMEOUT if request is None else self.timeout)
        while True:
            with contextlib.suppress(OSError):  # if it is gone, the read below says so
                if request is not None:
                    self.process.stdin.write(json.dumps(request).encode() + b'\n')
                    self.process.stdin.flush()
            while (end_of_line := self.buffer.find(b'\n', 0, most + 1)) < 0:
                if len(self.buffer) > most:  # refused unread, let alone counted
                    self.stop()
                    raise RuleError(f'{where}: sent over {most:,} bytes at once; a rule may send at most twice the '
                                    'case it was given, plus 1 MiB')
                if not select.select([self.process.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                    self.stop()
                    raise RuleError(f'{where}: still running after {limit:g} s (--rule-timeout SECONDS sets the '
                                    'limit per case)')
                if not (chunk := os.read(self.process.stdout.fileno(), 1 << 20)):
                    raise RuleError(f'{where}: the rules process ended (exit status {self.stop()}) without answering')
                self.buffer += chunk
            line, self.buffer = self.buffer[:end_of_line], self.buffer[end_of_line + 1:]
            try:
                reply = json.loads(line)
                SURROGATE.search(line) and json.dumps(reply, ensure_ascii=False).encode()  # JSON can carry one
            except UnicodeEncodeError:
                raise RuleError(f'{where}: sent a lone surrogate (half a UTF-16 pair), which is not text') from None
            except (ValueError, RecursionError):
                reply = None
            if not isinstance(reply, dict):
                raise RuleError(f'{where}: the rules process sent a reply that is not a JSON object')
            if 'error' in reply:  # one short printable line, whatever the rule's exception said
                raise RuleError(f'{where}: ' + cut(printable(str(reply['error'])), 2 * SHOWN))
            if count is None or not {'count', 'turn_costs'} & set(reply):
                self.cpu = max(self.cpu, reply['cpu']) if type(reply.get('cpu')) is float else self.cpu
                return reply
            request = self.counted(reply, count)

    def rule(self, path: Path, name: str) -> Callable[[dict, Callable], dict]:
        """A rule of the file as the lab runs it: (case, count) -> what a built-in rule returns."""
        index, self.rules = self.rules, self.rules + 1

        def rule(case: dict, count) -> dict:
            where = f'{path}: rule {name}: case {case["id"]}'
            history = case['history']
            if self.told[0] is not case or self.told[1] is not count:  # a case's rules are run one after another
                visible = {key: case[key] for key in VISIBLE if key in case}
                self.told = case, count, {'case': visible, **head(case, count)}, len(json.dumps(visible))
            request, self.last = {'rule': index, **self.told[2]}, None
            if (known := self.histories.get(id(history))) is None:  # kept below: its id stays its own
                request['turns'] = history
                places = turn_places(history)
                copies = [places[turn_key(turn_messages(turn))] for turn in history]
                known = self.histories[id(history)] = (history, len(self.histories), places, len(json.dumps(history)),
                                                       copies if len(places) < len(history) else None)  # None: no twins
            request['history'], most = known[1], MARGIN + 2 * (known[3] + self.told[3])
            self.case = case  # whose request a rule may send as turn indices (RemoteCount.count_built)
            if type(built := (reply := self.ask(request, where, count, most)).get('built')) is dict:
                try:  # a request the rules process summed itself: counted here, as it is built
                    messages, size, kept = self.build(built, count)
                except LabError as error:
                    raise RuleError(f'{where}: returned turns the counter does not accept: {error}') from None
            elif reply.get('counted') is True and self.last:
                messages, size, kept = self.last  # the request the lab counted for the rule, and the one it returned
            else:
                messages, kept = reply.get('messages'), None
                try:
                    size = count(messages)  # the lab's count; whatever the rule said about its size is not read
                except LabError as error:
                    raise RuleError(f'{where}: returned a request the counter does not accept: {error}') from None
            if kept is None or is_agent(case):
                return selection(messages, carried_turns(messages, known[2]), 0, size)
            return selection(messages, first_copies(kept, known[4]) if known[4] else kept, 0, size)
        return rule

    def build(self, built: dict, count) -> tuple[list[dict], int, list[int]]:
        """(messages, count, kept) of the request a rule sent as its turns and notes, checked (built_parts)."""
        return *built_request(self.case, count, *built_parts(built, len(self.case['history']))), built['kept']

    def counted(self, asked: dict, count) -> dict:
        """The lab's answer to a rule that counts: its counter on the request (or what it is built of), or turns."""
        try:
            if type(built := asked.get('count')) is dict:
                self.last = self.build(built, count)
                return {'answer': self.last[1]}
            if 'count' in asked:
                self.last = asked['count'], count(asked['count']), None
                return {'answer': self.last[1]}
            turns = asked['turn_costs']  # all pairs, or all agent turns: their messages are the counter's to check
            if not isinstance(turns, list) or not (all(type(turn) is list for turn in turns)
                                                   or all(map(is_pair, turns))):
                raise CounterError('turn_costs: expected a list of turns, all {"user": text, "assistant": text} '
                                   'or all lists of messages')
            return {'answer': count.turn_costs(turns)}
        except LabError as error:
            return {'error': str(error)}


def head(case: dict, count) -> dict:
    """What the lab tells the rules process with a call: whether `count` sums this case's requests built of its turns
    (then so may the rules process), the counter's name (the answers the rules process keeps are of that counter) and
    its count of the bare request, which every rule asks for (unless refused)."""
    told = {'additive': bool(getattr(count, 'additive', None) and count.additive(case)),
            'counter': getattr(count, 'name', None)}
    with contextlib.suppress(LabError):  # the rule's own count of it will say why
        told['bare'] = count(build_request(case, []))
    return told


def built_parts(built: dict, turns: int) -> tuple[list[int], list[str]]:
    """The turns and notes a rule's request is built of (RemoteCount.count_built), checked, else CounterError."""
    kept, notes = built.get('kept'), built.get('notes')
    if set(built) != {'kept', 'notes'} or type(kept) is not list or type(notes) is not list \
            or not set(map(type, kept)) <= {int} or kept and not 0 <= min(kept) <= max(kept) < turns \
            or len(set(kept)) < len(kept) or not set(map(type, notes)) <= {str}:  # read in C: hundreds of turns
        raise CounterError(f'count: expected {{"kept": distinct turn indices below {turns}, "notes": texts}}')
    return kept, notes


def check_name(path: Path, name) -> str:
    """The name as names are compared (LOOK_ALIKE folded, casefolded), or RuleError if it could pass for another
    row or forge one. Only ASCII: a Cyrillic e passes for a Latin one, and no folding of Unicode is complete."""
    if not isinstance(name, str) or not name or not (name.isascii() and name.isprintable()) or '|' in name \
            or name != ' '.join(name.split()) or (key := name.translate(LOOK_ALIKE).casefold()) in RESERVED:
        raise RuleError(f'{path}: rule {name!r}: a rule name must be printable ASCII without "|", single-spaced, '
                        f'and none of the lab\'s in any case, or with 1 or I for l, 0 for o ({", ".join(BUILT_IN)}, '
                        'best possible)')
    return key


def load_rule_files(paths: list, timeout: float = RULE_TIMEOUT) -> tuple[dict[str, Callable], list[dict]]:
    """(rules by name, in file order then each file's order; [{'file': name, 'sha256': hex}] per file)."""
    rules, origin, files, child = {}, {}, [], None
    for path in map(Path, paths):
        if not path.is_file() or path.suffix != '.py':  # importlib has no loader for another name
            raise RuleError(f'{path}: ' + ('a rules file is Python source, its name ending in .py' if path.is_file()
                                           else 'no such rules file'))
        child = child or Child(timeout)
        names = child.ask({'load': str(path), 'number': len(files)}, str(path)).get('names')
        for name in names if isinstance(names, list) else [None]:
            if (key := check_name(path, name)) in origin:
                raise RuleError(f'{path}: rule {name}: the name is taken by a rule of {origin[key]}')
            rules[name], origin[key] = child.rule(path, name), path
        files.append({'file': path_text(path.name), 'sha256': sha256_file(path)})
    return rules, files


def add_timeout_option(parser) -> None:
    def seconds(text: str) -> float:  # a positive number up to a day (select() cannot wait 1e308 s); argparse
        if not 0 < (value := float(text)) <= 86_400:  # refuses the rest in one line
            raise ValueError(text)
        return value

    parser.add_argument('--rule-timeout', type=seconds, default=RULE_TIMEOUT, metavar='SECONDS', help='the most a '
                        f'rules file may take to import, or a rule per case (default {RULE_TIMEOUT:g}; at most 86400)')
