"""Rules from a user's file, run beside the four: the plug-in contract of `evaluate.py --rules FILE.py`.

    .venv/bin/python evaluate.py --rules my_rules.py --format table
    .venv/bin/python evaluate.py --rules field_rules.py --rules my_rules.py --show dev-correction --strategy mine

A rules file defines RULES, a dict of name -> function(case, count) returning the request it would send. Each rule
sees the case without its labels; the lab counts what comes back, finds the history turns it carries and grades it
like the four, over budget or not. Whatever goes wrong is one RuleError naming file, rule and case. The contract in
full: docs/rules.md. Each file is imported under a name of its own, writing no __pycache__ beside it; this module
writes nothing and prints nothing.
"""
from collections.abc import Callable
import hashlib
import importlib.machinery
import importlib.util
from itertools import count as numbers
from pathlib import Path
import sys
import traceback

from best_possible import LABEL
from common import LabError
from strategies import RULES as BUILT_IN
from tokenizer import CounterError, plain

LABELS = ('required', 'stale')  # what a rule never sees
RESERVED = frozenset({*BUILT_IN, 'best possible', LABEL})  # names a rule may not take
MODULE_PREFIX = 'context_lab_rules_'  # + a number: each file's own module name
_module_numbers = numbers(1)  # one module name per import in this process, never reused


class RuleError(LabError):
    """A rules file or one of its rules cannot be run; the message names the file, rule and case."""


def raised_at(error: BaseException, path: Path) -> str:
    """Where in the rules file an exception was raised: ' (line 7 of my_rules.py)', or '' if not inside it.
    The last frame in that file is the rule's own line, even when the error came from deeper down."""
    where = str(path.resolve())
    lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__) if frame.filename == where]
    if isinstance(error, SyntaxError) and error.filename == where:
        lines.append(error.lineno)
    return f' (line {lines[-1]} of {path.name})' if lines else ''


def describe(error: BaseException) -> str:
    """An exception in one line: ZeroDivisionError('division by zero') -> 'ZeroDivisionError: division by zero'."""
    text = ' '.join(str(error).split())
    return f'{type(error).__name__}: {text}' if text else type(error).__name__


def import_file(path: Path):
    """The module a rules file defines, imported under a fresh name, writing no bytecode."""
    if not path.is_file():
        raise RuleError(f'{path}: no such rules file')
    name = f'{MODULE_PREFIX}{next(_module_numbers)}'
    loader = importlib.machinery.SourceFileLoader(name, str(path.resolve()))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    sys.modules[name] = module  # some code (dataclasses, pickle) looks its module up by name
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        loader.exec_module(module)
    except Exception as error:  # anything the file's own code raises is the file's fault: say so, in one line
        del sys.modules[name]
        raise RuleError(f'{path}: cannot import it: {describe(error)}{raised_at(error, path)}') from None
    finally:
        sys.dont_write_bytecode = writes
    return module


def file_rules(path: Path, module) -> dict[str, Callable]:
    """The RULES a module defines, checked: a dict of non-empty names to callables."""
    rules = getattr(module, 'RULES', None)
    if not isinstance(rules, dict):
        found = 'none' if rules is None else type(rules).__name__
        raise RuleError(f'{path}: expected RULES, a dict of name -> function(case, count); found {found}')
    for name, function in rules.items():
        if not isinstance(name, str) or not name.strip():
            raise RuleError(f'{path}: RULES: a rule name must be a non-empty string, got {name!r}')
        if not callable(function):
            raise RuleError(f'{path}: rule {name}: expected a function(case, count), got {type(function).__name__}')
    return rules


def visible(case: dict) -> dict:
    """What a rule sees of a case: everything but the labels, in containers of its own.

    visible({'id': 'a', 'history': [{'user': 'u', 'assistant': 'v'}], 'required': ['u'], 'stale': []})
      -> {'id': 'a', 'history': [{'user': 'u', 'assistant': 'v'}]}   (a new list of new dicts)
    """
    seen = {key: value for key, value in case.items() if key not in LABELS}
    seen['history'] = [dict(turn) for turn in case['history']]
    if isinstance(case.get('budget'), dict):
        seen['budget'] = dict(case['budget'])
    return seen


def request_of(returned, where: str) -> list[dict]:
    """The messages of what a rule returned: a list of messages, or a dict holding them under 'messages'."""
    messages = returned.get('messages') if isinstance(returned, dict) else returned
    if not isinstance(messages, list):
        got = 'a dict without a messages list' if isinstance(returned, dict) else type(returned).__name__
        raise RuleError(f'{where}: returned {got}; expected a list of chat messages '
                        "({'role', 'content'}) or a dict with 'messages'")
    return messages


def turn_places(history: list[dict]) -> dict[tuple, list[int]]:
    """Where each (user, assistant) text pair stands in a history: [A, B, A] -> {A: [0, 2], B: [1]}."""
    where: dict[tuple, list[int]] = {}
    for index, turn in enumerate(history):
        where.setdefault((turn['user'], turn['assistant']), []).append(index)
    return where


def carried_turns(history: list[dict], messages: list[dict], where: dict | None = None) -> list[int]:
    """Indices of the history turns a request carries as adjacent (user, assistant) pairs of the same text.

    With history [A, B, A] (turns 0 and 2 alike), messages [system, A.user, A.assistant, B.user, question]
    give [0]: A takes the earliest free copy, B's user message alone is no turn. Sending A twice gives [0, 2].
    `where` is turn_places(history), for a caller that already has it.
    """
    where = turn_places(history) if where is None else where
    taken, position = set(), 0
    while position < len(messages) - 1:
        first, second = messages[position], messages[position + 1]
        pair = (first['content'], second['content'])
        if first['role'] == 'user' and second['role'] == 'assistant' and pair in where:
            taken.update([index for index in where[pair] if index not in taken][:1])
            position += 1  # past the pair's user message; the line below passes its assistant message
        position += 1
    return sorted(taken)


def wrap(path: Path, name: str, function: Callable) -> Callable[[dict, Callable], dict]:
    """A user's rule as the lab runs it: (case, count) -> what a built-in rule returns."""
    # Cases of one conversation share its history list and come one after another: map its turns once.
    # The list is kept, so its id cannot be reused by another while it is remembered.
    latest: dict = {'history': None, 'where': {}}

    def rule(case: dict, count) -> dict:
        where = f'{path}: rule {name}: case {case.get("id", "?")}'
        try:
            returned = function(visible(case), count)
        except Exception as error:  # the user's code failed: report it as theirs, in one line, with its line
            raise RuleError(f'{where}: the rule raised {describe(error)}{raised_at(error, path)}') from None
        messages = request_of(returned, where)
        try:
            size = count(messages)  # the lab's count; whatever the rule said about its size is not read
        except CounterError as error:
            raise RuleError(f'{where}: returned a request the counter does not accept: {error}') from None
        messages = [{'role': plain(message['role']), 'content': plain(message['content'])} for message in messages]
        if latest['history'] is not case['history']:
            latest.update(history=case['history'], where=turn_places(case['history']))
        return {'messages': messages, 'turns': carried_turns(case['history'], messages, latest['where']), 'notes': 0,
                'input_tokens': size}
    rule.__name__ = rule.__qualname__ = name
    return rule


def load_rule_files(paths: list) -> tuple[dict[str, Callable], list[dict]]:
    """(rules by name, in file order then each file's order; [{'file': name, 'sha256': hex}] per file)."""
    rules: dict[str, Callable] = {}
    origin: dict[str, Path] = {}
    files = []
    for path in map(Path, paths):
        module = import_file(path)
        for name, function in file_rules(path, module).items():
            if name in RESERVED:
                raise RuleError(f'{path}: rule {name}: the name is taken by the lab (built-in rules: '
                                f'{", ".join(BUILT_IN)}; and best possible)')
            if name in rules:
                raise RuleError(f'{path}: rule {name}: the name is taken by a rule of {origin[name]}')
            rules[name], origin[name] = wrap(path, name, function), path
        files.append({'file': path.name, 'sha256': hashlib.sha256(path.read_bytes()).hexdigest()})
    return rules, files

