"""Count a chat request exactly as Gemma 4 E2B receives it.

    .venv/bin/python tokenizer.py   # the counter's profile and the count of a small example: is prepared/ ready?

    from tokenizer import count_request
    count_request([{'role': 'system', 'content': 'Answer only from the conversation.'},
                   {'role': 'user', 'content': 'Which database will we use?'}])

The count covers <bos>, every turn with its delimiters and the generation prompt, thinking off, rendered with the
text-only subset of the official template below; images, tool calls and thinking are refused, not guessed. Rules
read count(messages) -> int and count.turn_costs(history), the tokens each turn adds to any request.

Special tokens are split out before BPE runs, so a prompt's tokens are a sum of independent pieces (<bos>, each
`role\ncontent` between <|turn> and <turn|>, the newline after each turn, the closing `model\n`); and where no
token joins a newline to other text, a message's tokens are the sum of its lines'. So each distinct message (or
notes line) is encoded once per run. `splits_cleanly` (on load) and `lines_split_cleanly` (when first needed)
check both facts; where one fails, every count encodes the whole prompt. It reads prepared/ (or
$CONTEXT_LAB_PREPARED) and writes nothing.
"""
from collections.abc import Mapping
from functools import cached_property, lru_cache
import json
from operator import itemgetter
from pathlib import Path
import re

from case_set import THINKING_MARKERS
from common import LabError, python_command, run
from prepared_folder import MANIFEST, PREPARED, PREPARED_ENV, PREPARED_JSON, TOKENIZER_JSON, check_prepared, \
    read_manifest

# The text-only subset of the official Gemma 4 E2B chat template, thinking off, trimming contents as it does:
#   <bos><|turn>system\n{system}<turn|>\n<|turn>user\n{user}<turn|>\n<|turn>model\n{assistant}<turn|>\n...<|turn>model\n
TEMPLATE = ("{{- bos -}}{%- for message in messages -%}"
            "{{- '<|turn>' + message.role + '\\n' + message.content | trim + '<turn|>\\n' -}}"
            "{%- endfor -%}{{- '<|turn>model\\n' -}}")
BOS = '<bos>'
ROLES = {'system': 'system', 'user': 'user', 'assistant': 'model'}  # message role -> turn name
LINE_START = re.compile(r'(?<=\n)(?=[^\n])')  # a newline, then other text: see lines_split_cleanly
ROLE_AND_CONTENT, ROLE, TURN_TEXTS = itemgetter('role', 'content'), itemgetter('role'), itemgetter('user', 'assistant')
HISTORIES_KEPT = 16  # conversations whose turn costs stay cached; cases of one conversation come one after another


class CounterError(LabError):
    """The counter is not prepared, or a request is outside what it can count."""


def plain(text: str) -> str:
    """The characters of a str as an exact str: a subclass such as markupsafe.Markup would render escaped."""
    return str.__str__(text)


def check_message(index: int, message, previous_role: str | None) -> str:
    """The message's role, or CounterError if the E2B text format cannot hold it at `index`."""
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
    if role == 'assistant' and previous_role == 'assistant':  # the official template would merge them into one turn
        raise CounterError(f'message {index}: two assistant messages in a row are not counted')
    if role == 'assistant' and any(marker in content for marker in THINKING_MARKERS):
        raise CounterError(f'message {index}: assistant content with a thinking channel is not counted')
    return role


def checked(messages) -> list[dict]:
    """A request checked and mapped to the template's turns: [{'role': 'assistant', 'content': ' Hi '}]
    -> [{'role': 'model', 'content': ' Hi '}]."""
    if not isinstance(messages, list) or not messages:
        raise CounterError('a request must be a non-empty list of messages')
    roles = [check_message(index, message, messages[index - 1]['role'] if index else None)
             for index, message in enumerate(messages)]
    return [{'role': ROLES[role], 'content': plain(message['content'])} for role, message in zip(roles, messages)]


def piece(role: str, content: str) -> str:
    """The text between <|turn> and <turn|> for one message: piece('assistant', ' OK. ') -> 'model\\nOK.'"""
    return ROLES[role] + '\n' + content.strip()  # Jinja's `trim` is Python's str.strip


class TokenCounter:
    """The pinned tokenizer and chat format, loaded once, and the sizes of the messages it has seen."""

    def __init__(self, folder: Path = PREPARED, manifest_path: Path = MANIFEST):
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        from tokenizers import Tokenizer

        manifest, manifest_sha256 = read_manifest(manifest_path)
        if not (folder / PREPARED_JSON).exists():
            raise CounterError(f'the tokenizer is not prepared ({folder / PREPARED_JSON} is missing): '
                               f'run `{python_command()} prepare.py`')
        source, why = check_prepared(folder, manifest, manifest_sha256)
        if source is None:
            raise CounterError(f'{folder} is not a valid prepared counter: {why}; refusing to count: '
                               f'run `{python_command()} prepare.py`')
        self.tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_JSON))
        self.template = ImmutableSandboxedEnvironment().from_string(TEMPLATE)
        self.manifest = manifest
        self.fast = splits_cleanly(self.tokenizer)
        self.sizes: dict[tuple, int] = {}  # (role, content) -> tokens of its piece; one-line messages only
        self.lines: dict[str, int] = {}  # line -> tokens, for messages of several lines
        self.turns: dict[tuple, list[int]] = {}  # a conversation's (user, assistant) texts -> its turn costs
        # Every message pays <|turn>, <turn|> and a newline; every request <bos>, <|turn> and 'model\n'.
        self.per_message = 2 + len(self.encode('\n'))
        self.fixed = len(self.encode(BOS)) + 1 + len(self.encode('model\n'))

    @cached_property
    def lines_apart(self) -> bool:
        return self.fast and lines_split_cleanly(self.tokenizer)  # reads the whole vocabulary: only when needed

    def profile(self) -> dict:
        manifest, chat = self.manifest, self.manifest['chat_format']
        return {'model': manifest['publisher_model'], 'revision': manifest['revision'],
                'template_sha256': manifest['hub_files']['chat_template.jinja']['sha256'],
                'enable_thinking': chat['enable_thinking'], 'count_scope': chat['count_scope']}

    def prompt(self, messages: list[dict]) -> str:
        """The exact text the model receives for a request."""
        return self.template.render(bos=BOS, messages=checked(messages))

    def encode(self, text: str) -> list[int]:
        # Special-token strings in the text (<bos>, <|turn>, ...) become their single ids, as in the model's runtime.
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def __call__(self, messages: list[dict]) -> int:
        """Tokens the model receives for this request, generation prompt included."""
        if not self.fast:
            return len(self.encode(self.prompt(messages)))
        sizes = self.known_sizes(messages)
        if sizes is None:  # a request that may be malformed: check it message by message
            checked(messages)
            sizes = [None] * len(messages)
        for index, size in enumerate(sizes):
            if size is None:  # a message not seen before; its place in the request was checked already
                role = check_message(index, messages[index], messages[index - 1]['role'] if index else None)
                sizes[index] = self.message_size(role, messages[index]['content'])
        return self.fixed + self.per_message * len(sizes) + sum(sizes)

    def known_sizes(self, messages) -> list[int | None] | None:
        """Cached sizes of a well-formed request's messages (None for one not seen), or None if the request
        may be malformed. The hot path of every count: C-level maps over the request."""
        if type(messages) is not list or not messages:
            return None
        try:
            sizes = list(map(self.sizes.get, map(ROLE_AND_CONTENT, messages)))
        except (KeyError, TypeError):
            return None
        roles = list(map(ROLE, messages))
        if set(map(len, messages)) != {2} or 'system' in roles[1:] or ('assistant',) * 2 in zip(roles, roles[1:]):
            return None
        return sizes

    def message_size(self, role: str, content: str, keep: bool = False) -> int:
        """Tokens of one checked message's piece, encoded once. A message of several lines is summed from its
        lines' tokens and kept whole only if `keep` (a turn is; a notes block, which grows a line at a time, is not)."""
        role, content = plain(role), plain(content)
        size = self.sizes.get((role, content))
        if size is None:
            text = piece(role, content)
            several = '\n' in content.strip() and self.lines_apart
            size = sum(map(self.line_size, LINE_START.split(text))) if several else len(self.encode(text))
            if keep or not several:
                self.sizes[role, content] = size
        return size

    def line_size(self, line: str) -> int:
        size = self.lines.get(line)
        if size is None:
            size = self.lines[line] = len(self.encode(line))
        return size

    def turn_costs(self, history: list[dict]) -> list[int]:
        """Tokens each turn (its user and assistant message) adds to any request, worked out once per
        conversation: cases of one conversation, and copies of it, share one entry."""
        if not self.fast:
            raise CounterError('this tokenizer cannot be counted turn by turn')
        key = tuple(map(TURN_TEXTS, history))
        costs = self.turns.get(key)
        if costs is None:
            for index, (_, answer) in enumerate(key):  # as check_message refuses it, so the cache never holds it
                if any(marker in answer for marker in THINKING_MARKERS):
                    raise CounterError(f'history[{index}]: assistant content with a thinking channel is not counted')
            if len(self.turns) >= HISTORIES_KEPT:
                del self.turns[next(iter(self.turns))]  # the oldest
            costs = self.turns[key] = [2 * self.per_message + self.message_size('user', user, keep=True)
                                       + self.message_size('assistant', answer, keep=True) for user, answer in key]
        return costs

    def forget(self) -> None:
        """Empty every cache, as in a fresh process (benchmark.py times from here)."""
        self.sizes.clear(), self.lines.clear(), self.turns.clear()


def splits_cleanly(tokenizer) -> bool:
    """True when counting message by message must give the full count for this tokenizer: every added token is
    matched as-is (no stripping of neighbouring spaces, no word-boundary rule, no normalisation) and cannot straddle
    a boundary (each is `<...>` with no other '<' or '>' inside, while the template puts `<turn|>` right after each
    piece and `<|turn>` right before it), and the template's own markers are single tokens."""
    added = tokenizer.get_added_tokens_decoder().values()
    texts = {token.content for token in added}
    return not any(token.lstrip or token.rstrip or token.single_word or token.normalized for token in added) \
        and all(text.startswith('<') and text.endswith('>') and not {'<', '>'} & set(text[1:-1]) for text in texts) \
        and {BOS, '<|turn>', '<turn|>'} <= texts


def lines_split_cleanly(tokenizer) -> bool:
    """True when a text's tokens are the tokens of its parts cut at every newline followed by other text: for a BPE
    model, when no token, learned or added, holds a newline next to another character (so no merge can join the two
    sides of a cut), the normalizer at most replaces and the pre-tokenizer at most splits at a string without
    newlines, and nothing marks word starts or ends or looks whole words up before merging. Gemma 4's vocabulary
    keeps runs of newlines in tokens of their own, so this holds for the pinned tokenizer."""
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
def counter() -> TokenCounter:
    """The process-wide counter, loaded on first use."""
    return TokenCounter()


class LazyCount:
    """count_request: the process-wide counter's interface, loading the counter on first use."""

    def __call__(self, messages: list[dict]) -> int:
        return counter()(messages)

    def turn_costs(self, history: list[dict]) -> list[int]:
        return counter().turn_costs(history)


count_request = LazyCount()


def main(argv: list[str]) -> int:
    import argparse

    argparse.ArgumentParser(
        prog='tokenizer.py',
        description="Print the counter's profile and the token count of a small example request: a quick check "
                    f'that `.venv/bin/python prepare.py` worked. Reads {PREPARED} (set {PREPARED_ENV} to read another '
                    'prepared folder).').parse_args(argv)
    example = [{'role': 'system', 'content': 'Answer only from the conversation. If a fact is missing, say so.'},
               {'role': 'user', 'content': 'Which database will we use?'}]
    print(json.dumps({'profile': counter().profile(), 'example_tokens': count_request(example)}, indent=2))
    return 0


if __name__ == '__main__':
    run(main)
