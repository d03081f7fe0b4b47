"""Count a chat request exactly as Gemma 4 E2B receives it.

    from tokenizer import count_request
    count_request([{'role': 'system', 'content': 'Answer only from the conversation.'},
                   {'role': 'user', 'content': 'Which database will we use?'}])

The count covers the whole prompt the model is given: the <bos> token, every
turn with its delimiters, and the generation prompt that opens the model's
turn, with thinking off. It is what every strategy in this lab must fit under
its budget.

Run `.venv/bin/python prepare.py` once first: it writes the pinned tokenizer into
prepared/. This module only reads that folder; it writes nothing. It renders
requests with its own small template for plain text chats (system, user and
assistant messages) and refuses anything else (images, tool calls, thinking
blocks) instead of guessing how the official template would lay it out.

Counting is exact and fast. Special tokens are split out of the text before
BPE runs, so the prompt's count is a sum of independent pieces: <bos>, each
turn's `role\ncontent` between <|turn> and <turn|>, the newline after each
turn, and the closing `model\n`. `count_request` counts each distinct piece
once and sums; `count_rendered` renders the whole prompt and encodes it, and is
the reference the fast path is tested against. Where the prepared tokenizer
could let a special token straddle a piece boundary (see `splits_cleanly`),
every count falls back to the full render. `Tally` keeps the count of a request
while it is built up, from the same sums, so a strategy pays only for what each
candidate adds.

`.venv/bin/python tokenizer.py` prints the counter's profile and the count of a small
example request, which is a quick check that the preparation worked.

The prepared folder is prepared/ beside this file, or the folder the
environment variable CONTEXT_LAB_PREPARED names (for a checkout you cannot
write to); prepared_folder.py says where it is and what makes it valid.
"""
from collections.abc import Callable, Mapping
from functools import cached_property, lru_cache
import json
from operator import itemgetter
from pathlib import Path
import re
import sys

import cli

cli.require_packages(__name__)  # one clear line, not a traceback, if a locked package is missing

from jinja2.sandbox import ImmutableSandboxedEnvironment

# Where the counter's files are and what makes them valid is defined once, in prepared_folder.py.
# Assistant text holding these would be rewritten by the official template (case_set.py says so once).
from case_set import THINKING_MARKERS
from prepared_folder import (MANIFEST, PREPARED, PREPARED_ENV, PREPARED_JSON, TOKENIZER_JSON, check_prepared,
                             read_manifest)

# The text-only subset of the official Gemma 4 E2B chat template, thinking off:
#   <bos><|turn>system\n{system}<turn|>\n<|turn>user\n{user}<turn|>\n<|turn>model\n{assistant}<turn|>\n ... <|turn>model\n
# Every content is trimmed, as the official template trims it.
TEMPLATE = (
    "{{- bos -}}"
    "{%- for message in messages -%}"
    "{{- '<|turn>' + message.role + '\\n' + message.content | trim + '<turn|>\\n' -}}"
    "{%- endfor -%}"
    "{{- '<|turn>model\\n' -}}"
)
BOS = '<bos>'
ROLES = {'system': 'system', 'user': 'user', 'assistant': 'model'}  # message role -> turn name
ROLE_AND_CONTENT = itemgetter('role', 'content')
ROLE = itemgetter('role')
LINE_START = re.compile(r'(?<=\n)(?=[^\n])')  # a newline, then other text: see lines_split_cleanly


class CounterError(RuntimeError):
    """The counter is not prepared, or a request is outside what it can count."""


def plain(text: str) -> str:
    """The characters of a str, as an exact str.

    A str subclass renders differently: Jinja escapes plain text joined to a markupsafe.Markup, so
    '<|turn>' + Markup('hi') would become '&lt;|turn&gt;hi'. str.__str__ ignores a subclass's overrides.
    plain(Markup('hi')) -> 'hi' (type str)
    """
    return str.__str__(text)


def check_message(index: int, message, previous_role: str | None) -> str:
    """Return the message's role, or raise CounterError if the E2B text format cannot hold it at `index`.

    A message may be any mapping (a dict, or e.g. a MappingProxyType); turns() copies it into a plain dict.
    """
    if not isinstance(message, Mapping) or set(message) != {'role', 'content'}:
        keys = sorted(message) if isinstance(message, Mapping) else type(message).__name__
        raise CounterError(f'message {index}: expected exactly the keys role and content, got {keys} '
                           '(tool calls, images and thinking are not counted by this lab)')
    role, content = message['role'], message['content']
    if not isinstance(role, str) or role not in ROLES:  # isinstance first: an unhashable role is not a key
        raise CounterError(f'message {index}: unknown role {role!r}; expected one of {sorted(ROLES)}')
    if not isinstance(content, str):
        raise CounterError(f'message {index}: content must be a string, got {type(content).__name__}')
    if role == 'system' and index != 0:
        raise CounterError(f'message {index}: a system message may only come first')
    if role == 'assistant':
        if previous_role == 'assistant':
            # The official template merges consecutive assistant messages into one turn.
            raise CounterError(f'message {index}: two assistant messages in a row are not counted')
        if any(marker in content for marker in THINKING_MARKERS):
            raise CounterError(f'message {index}: assistant content with a thinking channel is not counted')
    return role


def turns(messages: list[dict]) -> list[dict]:
    """Check a request and map it to template turns.

    [{'role': 'assistant', 'content': ' Hi '}] -> [{'role': 'model', 'content': ' Hi '}]
    """
    if not isinstance(messages, list) or not messages:
        raise CounterError('a request must be a non-empty list of messages')
    out = []
    for index, message in enumerate(messages):
        role = check_message(index, message, messages[index - 1]['role'] if index else None)
        out.append({'role': ROLES[role], 'content': plain(message['content'])})
    return out


def piece(role: str, content: str) -> str:
    """The text between <|turn> and <turn|> for one message.

    piece('assistant', ' MySQL noted. ') -> 'model\\nMySQL noted.'
    """
    # The template trims with Jinja's `trim`, which is Python's str.strip.
    return ROLES[role] + '\n' + content.strip()


class Counter:
    """The pinned tokenizer and chat format, loaded once: the state every count shares."""

    def __init__(self, folder: Path = PREPARED, manifest_path: Path = MANIFEST):
        from tokenizers import Tokenizer  # imported here so `--help` style uses need no tokenizer

        manifest, manifest_sha256 = read_manifest(manifest_path, CounterError)
        if not (folder / PREPARED_JSON).exists():
            raise CounterError(f'the tokenizer is not prepared ({folder / PREPARED_JSON} is missing): '
                               f'run `{cli.python_command()} prepare.py`')
        source, why = check_prepared(folder, manifest, manifest_sha256)
        if source is None:
            raise CounterError(f'{folder} is not a valid prepared counter: {why}; refusing to count: '
                               f'run `{cli.python_command()} prepare.py`')
        self.tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_JSON))
        self.template = ImmutableSandboxedEnvironment().from_string(TEMPLATE)
        self.manifest = manifest
        self.pieces: dict[tuple, int] = {}  # (role, content) -> tokens; grows with the distinct messages seen
        self.fast = splits_cleanly(self.tokenizer)
        # Tokens every request pays whatever its messages: <bos>, then per turn <|turn>, <turn|> and the
        # newline; at the end <|turn> and 'model\n'.
        self.per_turn = 2 + len(self.encode('\n'))
        self.fixed = len(self.encode(BOS)) + 1 + len(self.encode('model\n'))

    @cached_property
    def lines_apart(self) -> bool:
        """Can a piece be measured line by line (see Tally)? Checked on first use: it reads the whole vocabulary."""
        return self.fast and lines_split_cleanly(self.tokenizer)

    def profile(self) -> dict:
        # Nothing here depends on which source prepared the files: both give the same counts.
        return {
            'model': self.manifest['publisher_model'],
            'revision': self.manifest['revision'],
            'template_sha256': self.manifest['hub_files']['chat_template.jinja']['sha256'],
            'enable_thinking': self.manifest['chat_format']['enable_thinking'],
            'count_scope': self.manifest['chat_format']['count_scope'],
        }

    def render(self, messages: list[dict]) -> str:
        return self.template.render(bos=BOS, messages=turns(messages))

    def encode(self, text: str) -> list[int]:
        # Special-token strings in the text (<bos>, <|turn>, ...) become their single ids, as in the model's runtime.
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def count_rendered(self, messages: list[dict]) -> int:
        """Render the whole prompt and encode it: the reference count."""
        return len(self.encode(self.render(messages)))

    def count(self, messages: list[dict]) -> int:
        """The same number as count_rendered, from cached per-message pieces."""
        if not self.fast:
            return self.count_rendered(messages)
        sizes = self.lookup(messages)
        if sizes is None:
            sizes = self.measure(messages)
        elif None in sizes:
            self.measure_new(messages, sizes)
        return self.fixed + self.per_turn * len(sizes) + sum(sizes)

    def lookup(self, messages) -> list[int | None] | None:
        """Cached piece sizes (None for a message not seen before), or None if the request is not well formed.

        This is the hot path of every strategy, so it runs as C-level maps over the request. A message
        found in the cache was checked when it was first measured; only its position is checked here.
        """
        if type(messages) is not list or not messages:
            return None
        try:
            keys = list(map(ROLE_AND_CONTENT, messages))
            sizes = list(map(self.pieces.get, keys))
        except (KeyError, TypeError):
            return None
        roles = list(map(ROLE, messages))
        if set(map(len, messages)) != {2} or 'system' in roles[1:] \
                or ('assistant', 'assistant') in zip(roles, roles[1:]):
            return None
        return sizes

    def measure_new(self, messages: list[dict], sizes: list) -> None:
        """Check and measure the messages `lookup` did not know, filling in their sizes."""
        for index, size in enumerate(sizes):
            if size is None:
                role = check_message(index, messages[index], messages[index - 1]['role'] if index else None)
                sizes[index] = self.piece_size(role, messages[index]['content'])

    def measure(self, messages) -> list[int]:
        """Check a request message by message, raising the precise error, and measure every message."""
        turns(messages)
        return [self.piece_size(message['role'], message['content']) for message in messages]

    def piece_size(self, role: str, content: str) -> int:
        """Tokens of one message's piece, encoded the first time it is asked for and cached after.

        The cache holds exact strs only; a str subclass equal to a cached text finds that text's size.
        """
        size = self.pieces.get((role, content))
        if size is None:
            role, content = plain(role), plain(content)
            size = self.pieces[role, content] = len(self.encode(piece(role, content)))
        return size

    def count_once(self, messages: list[dict]) -> int:
        """count(messages), leaving the cache as it was: for a request that is measured once and dropped."""
        known = len(self.pieces)
        try:
            return self.count(messages)
        finally:
            while len(self.pieces) > known:
                self.pieces.popitem()  # a dict pops its newest entries first: exactly the ones this count added


class Tally:
    """A request under construction and its exact count: fixed first messages (`head`), groups of messages
    offered one at a time (kept in key order), and a last message (`tail`) that may be swapped.

    On the fast path a count is additive: every message adds per_turn plus the tokens of its own piece,
    whatever stands next to it (see Counter.count), so for any head, groups and tail

        count(head + groups + tail) == count(head + tail) + sum(count(group) - fixed for group in groups)

    and offering a group costs a look-up of its own two messages, however much the request already holds.
    A piece is additive in its lines too, where the tokenizer allows it (see lines_split_cleanly): its
    tokens are the sum of the tokens of the parts LINE_START cuts it into, so a tail that differs from the
    last one by a line costs the encoding of that line. These two identities are the only incremental
    arithmetic in the lab's selection. Two views outside it read the first identity back: best_possible.py
    prices each turn as count(head + [turn] + tail) - count(head + tail) and checks the chosen request's real
    count against the sum, and request_view.py shows each message's share. With any other count (the
    fallback path, or a function that is not a Counter's count) every offer counts the whole candidate
    request: exact, and slower the more it holds. Either way `size` is the count of `messages()`.
    """

    def __init__(self, count: Callable[[list[dict]], int], head: list[dict], tail: list[dict]):
        self.count = count
        self.counter = piecewise(count)  # None: count every candidate whole
        self.head, self.tail = head, tail
        self.groups: dict = {}  # key -> messages
        self.lines: dict[str, int] = {}  # line -> tokens, for tails; kept only as long as this request
        self.frame = count(head + tail)  # the part of `size` that head and tail make
        self.size = self.frame

    def messages(self, groups: dict | None = None, tail: list[dict] | None = None) -> list[dict]:
        """The request: head, the groups in key order, then the tail (or the ones given instead)."""
        groups = self.groups if groups is None else groups
        return [*self.head, *(message for key in sorted(groups) for message in groups[key]),
                *(self.tail if tail is None else tail)]

    def offer(self, key, group: list[dict], limit: int) -> bool:
        """Keep `group` under `key` if the request with it counts at most `limit`; say whether it was kept."""
        if key in self.groups:
            return False
        if self.counter:
            size = self.size + self.count(group) - self.counter.fixed
        else:
            size = self.count(self.messages({**self.groups, key: group}))
        if size > limit:
            return False
        self.groups[key], self.size = group, size
        return True

    def offer_tail(self, tail: list[dict], limit: int) -> bool:
        """Swap in `tail` if the request with it counts at most `limit`; say whether it was swapped in."""
        if self.counter:
            frame = self.tail_frame(tail)
            size = self.size - self.frame + frame
        else:
            frame = size = self.count(self.messages(tail=tail))
        if size > limit:
            return False
        self.tail, self.frame, self.size = tail, frame, size
        return True

    def tail_frame(self, tail: list[dict]) -> int:
        """count(head + tail) on the fast path, leaving the counter's cache as it was: a tail is offered once."""
        if not self.counter.lines_apart:
            return self.counter.count_once(self.head + tail)
        turns(self.head + tail)  # refuse what count would refuse
        pieces = [piece(message['role'], message['content']) for message in tail]
        return self.count(self.head) + sum(self.counter.per_turn + sum(map(self.line_size, LINE_START.split(text)))
                                           for text in pieces)

    def line_size(self, line: str) -> int:
        size = self.lines.get(line)
        if size is None:
            size = self.lines[line] = len(self.counter.encode(line))
        return size


def piecewise(count) -> Counter | None:
    """The Counter whose cached pieces `count` adds up (count_request, or a fast Counter's own count), else None."""
    owner = counter() if count is count_request else getattr(count, '__self__', None)
    method = Counter.count if count is count_request else getattr(count, '__func__', None)
    if isinstance(owner, Counter) and method is Counter.count and owner.fast:
        return owner
    return None


def splits_cleanly(tokenizer) -> bool:
    """True when counting piece by piece must give the full count for this tokenizer.

    That holds when every added token is matched as-is (no stripping of
    neighbouring spaces, no word-boundary rule, no normalisation), and when a
    special token cannot straddle a boundary: each is `<...>` with no other
    '<' or '>' inside, while the template puts `<turn|>` right after each piece
    and `<|turn>` right before it. The template's own markers must be single tokens.
    """
    added = tokenizer.get_added_tokens_decoder().values()
    for token in added:
        text = token.content
        if token.lstrip or token.rstrip or token.single_word or token.normalized:
            return False
        if not (text.startswith('<') and text.endswith('>')) or '<' in text[1:-1] or '>' in text[1:-1]:
            return False
    contents = {token.content for token in added}
    return {BOS, '<|turn>', '<turn|>'} <= contents


def lines_split_cleanly(tokenizer) -> bool:
    """True when a text's tokens are the tokens of its parts cut at every newline followed by other text.

    That holds for a BPE model when no token, learned or added, holds a newline next to any other
    character (so no merge can join the two sides of a cut, and each side merges as it would alone), the
    normalizer at most replaces a string without newlines by one without newlines, the pre-tokenizer at
    most splits at such a string, and nothing marks where a word starts or ends or looks whole words up
    before merging. Gemma 4's vocabulary keeps runs of newlines in tokens of their own, so this holds
    for the pinned tokenizer.
    """
    from tokenizers.models import BPE

    def state(part) -> dict | None:  # a normalizer's or pre-tokenizer's settings, as tokenizer.json holds them
        return None if part is None else json.loads(part.__getstate__())

    def newline_free(replace: dict) -> bool:
        return set(replace.get('pattern', {})) == {'String'} and '\n' not in replace['pattern']['String'] \
            and '\n' not in replace.get('content', '')

    model, normalizer, splitter = tokenizer.model, state(tokenizer.normalizer), state(tokenizer.pre_tokenizer)
    if not isinstance(model, BPE) or model.dropout or model.continuing_subword_prefix or model.end_of_word_suffix \
            or model.ignore_merges:  # a whole-word look-up would see the line's neighbours
        return False
    if normalizer is not None and not (normalizer.get('type') == 'Replace' and newline_free(normalizer)):
        return False
    if splitter is not None and not (splitter.get('type') == 'Split' and not splitter.get('invert')
                                     and newline_free(splitter)):
        return False
    vocabulary = tokenizer.get_vocab(with_added_tokens=True)
    return '\n' in vocabulary and not any('\n' in token and token.strip('\n') for token in vocabulary)


@lru_cache(maxsize=1)
def counter() -> Counter:
    """The process-wide counter, loaded on first use."""
    return Counter()


def count_request(messages: list[dict]) -> int:
    """Tokens the model receives for this request, generation prompt included."""
    return counter().count(messages)


def count_rendered(messages: list[dict]) -> int:
    """The same count, by rendering and encoding the whole prompt (slower; the reference)."""
    return counter().count_rendered(messages)


def main(argv: list[str]) -> int:
    import argparse

    argparse.ArgumentParser(
        prog='tokenizer.py',
        description="Print the counter's profile and the token count of a small example request: a quick check "
                    f'that `.venv/bin/python prepare.py` worked. Reads {PREPARED} (set {PREPARED_ENV} to read another '
                    'prepared folder).').parse_args(argv)
    example = [{'role': 'system', 'content': 'Answer only from the conversation. If a fact is missing, say so.'},
               {'role': 'user', 'content': 'Which database will we use?'}]
    try:
        print(json.dumps({'profile': counter().profile(), 'example_tokens': count_request(example)}, indent=2))
    except CounterError as error:
        print(f'tokenizer.py: {error}', file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    cli.run(main)
