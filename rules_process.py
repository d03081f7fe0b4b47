"""The rules process: what runs a user's rules files beside the lab (rule_files.py starts it and reads its replies).

    .venv/bin/python -B -c 'import rules_process; rules_process.serve()'   # as rule_files.Child runs it

It imports each file the lab names, then answers one request at a time on stdin: a rule's call on a label-free
copy of a case, its `count` asking the lab's counter through the pipe (RemoteCount), the reply in plain JSON on
stdout. A rule's prints go to stderr, labelled. A watcher ends the process, with all it started, when the lab is
gone. It writes no file and decides nothing the lab does not check again (docs/rules.md).
"""
from collections.abc import Callable
import importlib.util
import io
import json
import os
from pathlib import Path
import select
import signal
import sys
import time

from rule_files import RuleError, built_parts, describe
from shapes import build_request, each_turn, is_agent, turn_key
from tokenizer import CounterError


def import_file(path: Path, number: int) -> list[tuple[str, Callable]]:
    """The RULES a file defines, imported as a module of a name of its own (the process writes no bytecode)."""
    spec = importlib.util.spec_from_file_location(f'context_lab_rules_{number}', path.resolve())
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses, pickle look it up
    try:
        spec.loader.exec_module(module)
    except BaseException as error:  # anything the file's own code raises, or exits with, is the file's fault
        raise RuleError(f'cannot import it: {describe(error, path)}') from None
    if not isinstance(rules := getattr(module, 'RULES', None), dict):
        raise RuleError('expected RULES, a dict of name -> function(case, count); found '
                        + ('none' if rules is None else type(rules).__name__))
    try:
        return list(rules.items())
    except BaseException as error:  # a dict whose items() raises
        raise RuleError(f'cannot read its RULES: {describe(error, path)}') from None


class Labelled(io.TextIOBase):
    """sys.stdout and sys.stderr of the rules process: each line goes to stderr after `label`."""
    label, fresh, encoding, path = '', True, 'utf-8', Path()

    def write(self, text: str) -> int:
        for line in str.splitlines(text, True):  # a text that is no str raises, as any file's write does
            os.write(2, ((self.label if self.fresh else '') + line).encode('utf-8', 'backslashreplace'))
            self.fresh = line.endswith(('\n', '\r'))
        return len(text)


class RemoteCount:
    """A rule's `count` in the rules process: the lab's counter, asked through the pipe, answers kept for the case;
    a request built of the case's turns is summed here where the lab sums it so too (`additive`)."""

    def __init__(self, requests, replies):
        self.requests, self.replies, self.counts, self.turns, self.case = requests, replies, {}, {}, None
        self.additive, self.built, self.bare = False, None, None  # built: (turns and notes, messages) of the request
        # summed here last; bare: the lab's count of the case's bare request (bare_request)
        self.sent_costs = {}  # id of a history as the lab sent it (kept while the counter is) -> its turn costs
        self.counter = None  # the name of the lab's counter these answers are of (head); a sweep may change it

    def send(self, line: str) -> None:  # JSON's ASCII form: a lone surrogate travels escaped, for the lab to refuse
        print(line, file=self.replies, flush=True)

    def ask(self, what: str, sent: str):
        self.send(f'{{"{what}": {sent}}}')
        if 'error' in (answer := json.loads(self.requests.readline())):
            raise CounterError(answer['error'])
        return answer['answer']

    def __call__(self, messages: list[dict], sent: str | None = None) -> int:
        if self.bare is not None and messages == self.bare_request:  # as the lab sent it: no JSON to make
            return self.bare
        if (key := sent or json.dumps(messages)) not in self.counts:
            self.counts[key] = self.ask('count', key)
            self.last, self.built = list(map(dict, messages)), None  # what the lab counted last, as it stands now
        return self.counts[key]

    def count_built(self, messages: list[dict], case: dict, kept, notes=()) -> int:
        """self(messages) for messages = build_request(case, kept, notes); where they are those of the case as the lab
        sent it, the lab builds them from its own copy: only the turns and notes travel (not 1 MB at 15,808 tokens).
        Where the lab counts such a request as its head and its turns' costs, that sum is made here, unasked, and the
        lab counts the request when it comes back as its turns and notes (the reply's `built`)."""
        try:
            expected = self.original and build_request(self.original, kept, notes)  # of dicts no rule is given
        except (IndexError, TypeError):  # turns the messages cannot have been built of
            expected = None
        built = {'kept': sorted(kept), 'notes': list(notes)} if (sent := messages == expected) else None
        if not (sent and self.additive):
            return self(messages, json.dumps(built) if sent else None)
        built_parts(built, len(self.original['history']))  # refused here as the lab would refuse it
        cost = self.turn_costs(self.original['history'])
        size = self(build_request(self.original, [], notes)) + sum(map(cost.__getitem__, kept))
        self.last, self.built = None, (built, expected)  # compared again as returned (answer), not copied: it is long
        return size

    def returned(self, messages) -> dict | None:
        """The reply for a rule that returned these messages, if the lab has them: the turns and notes of the request
        summed here ('built'), or the request the lab counted last ('counted'); else None."""
        if self.built is not None:
            if messages == self.built[1]:
                return {'built': self.built[0]}
        elif self.last is not None and messages == self.last:
            return {'counted': True}
        return None

    def turn_costs(self, history: list) -> list[int]:
        """The lab's turn costs of a history; of the case's own as sent (most often), found by comparing the turns in C,
        kept for the run (the list is kept for it), not by keying its hundreds of turns again."""
        sent = self.original is not None and history == self.original['history']
        if sent and (cost := self.sent_costs.get(id(self.original['history']))) is not None:
            return list(cost)
        if (key := each_turn(turn_key, history)) not in self.turns:
            self.turns = {key: self.ask('turn_costs', json.dumps(history))}
        if sent:
            self.sent_costs[id(self.original['history'])] = self.turns[key]
        return list(self.turns[key])


def serve() -> None:
    """The rules process: import files and run their rules on label-free cases, one request at a time."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the lab's to handle; it then ends this process
    if os.fork() == 0:  # a watcher that runs no rule, so none can hold it up (a regex that holds the GIL)
        os.closerange(1, 3)  # it holds no end of a pipe the lab reads
        (lab := select.poll()).register(0, 0)  # only the lab writes to stdin: when it is gone, however it ended,
        lab.poll()  # the pipe hangs up
        os.killpg(0, signal.SIGKILL)  # and the rules process goes, with all it started and itself
    count = RemoteCount(os.fdopen(os.dup(0), 'rb'), os.fdopen(os.dup(1), 'w', encoding='ascii'))
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # a rule reading stdin reads nothing,
    os.dup2(2, 1)  # and one writing to fd 1 writes to stderr
    sys.stdout = sys.stderr = out = Labelled()
    rules, histories, helpers, reply = [], {}, Helpers(), '{"ready": true}'
    while True:
        count.send(reply)
        if not (line := count.requests.readline()):
            os._exit(0)  # the lab is done
        try:
            reply = answer(json.loads(line), rules, histories, out, count, helpers)
        except RuleError as error:
            reply = json.dumps({'error': str(error)})
        except BaseException as error:  # the file's code ran where the lab reads it (a module's __getattr__, ...)
            reply = json.dumps({'error': f'failed: {describe(error, out.path)}'})


class Helpers:
    """The modules each rules file's folder makes (helper.py there, a package there), in sys.modules only while
    that folder's code runs: two folders' helper.py are two modules, whichever was imported first or later."""

    def __init__(self):
        self.lab, self.kept, self.folder, self.size = set(sys.modules), {}, None, 0

    def enter(self, folder: str) -> None:
        """First on the import path `folder`, its own helpers in sys.modules and no other folder's."""
        if folder == self.folder:
            return
        if self.folder is not None and len(sys.modules) != self.size:  # the folder before imported something
            self.kept[self.folder] = {name: module for name, module in sys.modules.items()
                                      if name not in self.lab and made_in(self.folder, name, module)}
        for name in self.kept.get(self.folder, ()):
            sys.modules.pop(name, None)
        sys.path[:self.folder is not None] = [folder]  # put first, or in place of the folder before
        sys.modules.update(self.kept.get(folder, {}))
        self.folder, self.size = folder, len(sys.modules)


def made_in(folder: str, name: str, module) -> bool:
    """Whether a module is made by a file of that folder under its own name: name.py, or name/ for name.sub."""
    base = os.path.join(folder, name.partition('.')[0])
    return str(getattr(module, '__file__', None)).startswith((base + '.', base + os.sep))


def answer(request: dict, rules: list, histories: dict, out: Labelled, count: RemoteCount, helpers: Helpers) -> str:
    """The reply to one request, as JSON text: a file's rule names, or the request a rule sends for a case."""
    if 'load' in request:
        out.path, out.label = (path := Path(request['load'])), f'{request["load"]}: '
        helpers.enter(folder := str(path.resolve().parent))  # a helper module beside the file can be imported
        found = import_file(path, request['number'])
        rules += [(path, folder, name, function) for name, function in found]
        return json.dumps({'names': [name for name, _ in found]})
    if 'turns' in request:  # a conversation not sent before
        histories[request['history']] = request['turns'], None
    out.path, folder, name, function = rules[request['rule']]
    out.label, count.last, count.built = f'{out.path}: rule {name}: ', None, None
    helpers.enter(folder)
    case = dict(request['case'], history=working_copy(histories, request['history']))
    if count.counter != request.get('counter'):  # another counter (budget_sweep --counter a,b): no answer holds
        count.counter, count.sent_costs, count.turns, count.case = request.get('counter'), {}, {}, None
    if count.case != request['case']:  # the counts of one case's requests serve all its rules
        count.case, count.counts = request['case'], {}
        count.bare, count.bare_request = request.get('bare'), build_request(case, [])  # the lab's count of the bare
        # request, which every rule asks for
    # the case as sent, which a rule cannot change, unless it has tools (a list a rule could change in place)
    count.original = None if is_agent(case) else dict(request['case'], history=histories[request['history']][0])
    count.additive = request.get('additive') is True
    try:
        returned = function(case, count)
        messages = returned.get('messages') if isinstance(returned, dict) else returned
        known = count.returned(messages)  # most often: the lab has it already
    except BaseException as error:
        raise RuleError(f'the rule raised {describe(error, out.path)}') from None
    if not isinstance(messages, list):
        got = 'a dict without a messages list' if isinstance(returned, dict) else type(returned).__name__
        raise RuleError(f"returned {got}; expected a list of chat messages or a dict with 'messages'")
    try:
        reply = known or {'messages': messages}
        return json.dumps({**reply, 'cpu': time.process_time()})
    except BaseException as error:
        raise RuleError(f'returned what JSON cannot carry: {describe(error, out.path)}') from None


def working_copy(histories: dict, number: int) -> list:
    """The copy of a conversation a rule gets, through which no rule can change the original: the call before's while
    it equals the original (compared in C), so that what rules work out per history list is found again; else anew."""
    turns, working = histories[number]
    if working is None or working != turns:
        working = list(map(dict.copy, turns)) if set(map(type, turns)) == {dict} \
            else [turn.copy() if type(turn) is dict else json.loads(json.dumps(turn)) for turn in turns]
        histories[number] = turns, working
    return working
