"""Count a chat request exactly as the chosen model receives it: Gemma 4 E2B's counter unless --counter names another.

    .venv/bin/python tokenizer.py [--counter NAME]   # the counter's profile and the count of a small example
    .venv/bin/python tokenizer.py --counter list     # every counter, what it pins, and whether it is prepared

    from tokenizer import counter
    counter()([{'role': 'system', 'content': 'Answer only from the conversation.'},
                {'role': 'user', 'content': 'Which database will we use?'}])   # the chosen counter's count

A counter is a vocabulary and a chat format, both pinned in tokenizer-manifest.json (docs/counters.md): the model's
official template as tool_formats.py renders it, thinking off, its fixed inputs (Llama 3's date) filled in. Images
and thinking are refused, not guessed. Rules read count(messages) -> int and count.turn_costs(history), the tokens
each turn adds to any request; the grader reads count.name (whose template it grades) and --show count.shares.

A prompt is counted as the sum of its messages' (or their lines') tokens, each distinct one encoded once per run,
where `splits_cleanly` and `line_cuts` find the sum exact (docs/speed.md says why); an agent request whole, or as a
rule built it, from its turns' rendered texts (count_built). It
reads prepared/ (or $CONTEXT_LAB_PREPARED; another counter from prepared-NAME/ beside it) and writes nothing.
"""
import argparse
from bisect import bisect_right
from collections.abc import Mapping
from functools import cached_property
from itertools import accumulate
import json
from operator import itemgetter
from pathlib import Path
import re

from common import run
from shapes import HISTORIES_KEPT, ROLE_AND_TEXT, build_request, each_turn, is_agent, per_history, turn_key
from tool_formats import CounterError, checked_request, frame_span, per_turn, prompt_text, refuse_thinking, \
    request_parts, turn_prompt_text
from prepared_folder import DEFAULT, PREPARED_ENV, PREPARED_JSON, TOKENIZER_JSON, check_prepared, counter_folder, \
    counter_list, prepare_command, read_manifest, served_gguf, vocab_spec

HEADS_KEPT = 4096  # bare-request counts count_built keeps (LoCoMo's 1,534 questions fit); then it starts anew
LINE_START = re.compile(r'(?<=\n)(?=[^\n])')  # a newline, then other text: see line_cuts
LINE_BEFORE_TEXT = re.compile(r'(?<=\n)(?=\S)')  # a newline, then no whitespace: see line_cuts
# Byte-level BPE splits that never put a newline and a following non-space in one piece (docs/counters.md)
SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}%s"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LINE_SAFE_SPLITS = (SPLIT % '{1,3}', SPLIT % '')  # Llama 3's and Qwen 2's
MARKER = re.compile(r'<[^<>\s]+>')  # what a chat format writes as a special token: <|turn>, <|eot_id|>
ROLE = itemgetter('role')
SELECTED = {'name': DEFAULT}  # the counter counter() returns; scripts choose it with --counter (choose_counter)
LOADED: dict[str, 'TokenCounter'] = {}  # each counter counter() has loaded, by name


def checked(messages) -> list[dict]:
    """A text-only request checked as every request is (tool_formats.checked_request), as plain dicts; CounterError
    too for two assistant messages in a row, which the official template would merge: no sum of messages."""
    request = checked_request(messages)
    for index, (before, after) in enumerate(zip(request, request[1:]), start=1):
        if before['role'] == 'assistant' == after['role']:
            raise CounterError(f'message {index}: two assistant messages in a row are not counted')
    return request


def agent_request(messages) -> bool:
    """True for a list holding a tool message, a call or a tools list: what tool_formats.py renders."""
    return type(messages) is list and any(isinstance(message, Mapping) and (
        message.get('role') == 'tool' or 'tool_calls' in message or 'tools' in message) for message in messages)


def tools_apart(messages) -> tuple[list, list | None]:
    """An agent request as tool_formats reads it: its messages as dicts, and the tools its system message carries."""
    request = [dict(message) if isinstance(message, Mapping) else message for message in messages]
    return request, request[0].pop('tools', None) if type(request[0]) is dict else None


def chat_format(definition: dict) -> dict:
    """A counter's chat format with its template's fixed inputs filled in, e.g. Llama 3's {date_string}."""
    fixed = definition.get('fixed_inputs', {})
    form = {key: value.format_map(fixed) if isinstance(value, str) else value
            for key, value in definition['format'].items()}
    return form | {'open': {role: text.format_map(fixed) for role, text in form['open'].items()}}


def markers(form: dict) -> set[str]:
    """The special tokens a chat format writes: markers(Gemma's) -> {'<bos>', '<|turn>', '<turn|>'}."""
    texts = [form['prefix'], form['suffix'], form['close'], form['no_system'] or '', *form['open'].values()]
    return set(MARKER.findall(''.join(texts)))


class TokenCounter:
    """One pinned tokenizer and chat format, loaded once, and the sizes of the messages it has seen."""

    def __init__(self, folder: Path | None = None, name: str = DEFAULT):
        from tokenizers import Tokenizer

        manifest, manifest_sha256 = read_manifest()
        folder = counter_folder(name) if folder is None else folder
        advice = f'run `{prepare_command(name, served_gguf(manifest, name))}`'
        if not (folder / PREPARED_JSON).exists():
            raise CounterError(f'the tokenizer is not prepared ({folder / PREPARED_JSON} is missing): {advice}')
        if why := check_prepared(folder, manifest, manifest_sha256, name=name)[1]:
            raise CounterError(f'{folder} is not a valid prepared counter: {why}; refusing to count: {advice}')
        self.name, self.manifest, self.definition = name, manifest, manifest['counters'][name]
        self.form = chat_format(self.definition)
        self.tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_JSON))
        self.fast = splits_cleanly(self.tokenizer, self.form)
        self.sizes: dict[tuple, int] = {}  # (role, content) -> tokens of its span; one-line messages only
        self.lines: dict[str, int] = {}  # line -> tokens, for messages of several lines
        self.heads: dict[tuple, int] = {}  # (instructions, question) -> tokens of a pair case's bare request
        self.turns: dict[tuple, list[int]] = {}  # a conversation's (user, assistant) texts -> its turn costs
        # Every request pays prefix and generation prompt; one without a system message, what some write instead.
        self.fixed = len(self.encode(self.form['prefix'])) + len(self.encode(self.form['suffix']))
        no_system = self.form['no_system']
        self.no_system = 0 if no_system is None else len(self.encode(frame_span(self.form, 'system', no_system)))

    @cached_property
    def lines_apart(self) -> re.Pattern | None:
        """Where a span may be cut into lines counted apart, None if nowhere (reads the vocabulary: when needed)."""
        return line_cuts(self.tokenizer) if self.fast else None

    def profile(self) -> dict:
        manifest, chat = self.manifest, self.manifest['chat_format']
        if self.name == DEFAULT:  # as every recorded report has it
            return {'model': manifest['publisher_model'], 'revision': manifest['revision'],
                    'template_sha256': manifest['hub_files']['chat_template.jinja']['sha256'],
                    'enable_thinking': chat['enable_thinking'], 'count_scope': chat['count_scope']}
        spec = vocab_spec(manifest, self.name)  # the pins prepared_folder.pins lists for the counter
        vocab, template = spec['members']['vocab'], spec['members']['template']
        return {'name': self.name, 'model': self.definition['publisher_model'], 'vocab': vocab['path'],
                'vocab_sha256': vocab['sha256'], 'template': template['path'], 'template_sha256': template['sha256'],
                'tokenizer_sha256': spec['built_tokenizer']['sha256'], 'fixed_inputs': self.definition['fixed_inputs'],
                'count_scope': chat['count_scope']}

    def prompt(self, messages: list[dict]) -> str:
        """The exact text the model receives for a request, as tool_formats renders it. An agent request (tool calls,
        tool results, or tools on its system message: shapes.build_request) is rendered valid or not, as the model
        would receive it, and counted whole."""
        if not agent_request(messages):
            return self.rendered(prompt_text, checked(messages))
        return self.rendered(prompt_text, *tools_apart(messages))

    def shares(self, messages: list[dict]) -> list[int]:
        """An agent request's tokens part by part as the model receives it: [the prefix, the system message (and what
        the template writes there: Gemma 4's and Qwen 2.5's tools), each message after it, the generation prompt]. A
        token counts to the part its text starts in, so the shares sum to the count; a message the template writes
        inside another's text (Gemma 4's results, in their call's turn) or drops has 0."""
        prompt = self.prompt(messages)  # checked and refused as every count is
        head, pieces, tail = request_parts(self.name, self.form, *tools_apart(messages))
        ends = list(accumulate(map(len, [self.form['prefix'], head[len(self.form['prefix']):], *pieces, tail])))
        shares = [0] * len(ends)
        for start, _ in self.tokenizer.encode(prompt, add_special_tokens=False).offsets:
            shares[bisect_right(ends, start)] += 1
        return shares

    def refuse(self, content: str) -> None:
        """CounterError for text this counter's vocab reads otherwise than the model's own tokenizer does."""
        if held := [text for text in self.definition.get('not_counted', ()) if text in content]:
            raise CounterError(f"{self.name} does not count a message holding {held[0]!r}: the model's own tokenizer "
                               f'reads it otherwise than the vocab of the archive (tokenizer-manifest.json, '
                               f'counters.{self.name}.not_counted)')

    def encode(self, text: str) -> list[int]:
        # Special-token strings in the text (<bos>, <|turn>, ...) become their single ids, as in the model's runtime.
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def __call__(self, messages: list[dict]) -> int:
        """Tokens the model receives for this request, generation prompt included."""
        sizes = self.known_sizes(messages) if self.fast else None
        if sizes is None:  # a request that may be malformed, or a message not seen before
            if not self.fast or agent_request(messages):
                return len(self.encode(self.prompt(messages)))
            sizes = [self.message_size(*ROLE_AND_TEXT(message)) for message in checked(messages)]
        return self.fixed + sum(sizes) + (0 if messages[0]['role'] == 'system' else self.no_system)

    def count_built(self, messages: list[dict], case: dict, kept, notes=()) -> int:
        """self(messages) for messages = shapes.build_request(case, kept, notes), without reading them all: its head
        (system message and question) and its turns' cached costs (turn_costs). A pair case's turns are their
        messages' cached sizes, exactly what self(messages) sums. An agent case's are their rendered texts: the
        template renders the request as its head's text with each turn's text put in (tool_formats.per_turn), and
        each turn's text starts with a special token, so the request's tokens are the head's plus each turn's
        (splits_cleanly); Llama 3 with a tools list, which goes into the first turn, is counted whole."""
        history, tools = case['history'], case.get('tools') or None
        agent = bool(history) and type(history[0]) is list
        if not self.fast or (tools and not agent) or not per_turn(self.name, tools):
            return self(messages)
        cost = self.turn_costs(history)
        return self.head(case, notes) + sum(map(cost.__getitem__, kept))

    def head(self, case: dict, notes=()) -> int:
        """The count of a case's bare request with its notes block; a pair case's without notes is kept by its
        (instructions, question), which the cases of LoCoMo's conversations repeat across rules and budgets."""
        if notes or is_agent(case):
            return self(build_request(case, [], notes))
        if (head := self.heads.get(key := (case['instructions'], case['current']))) is None:
            self.heads = self.heads if len(self.heads) < HEADS_KEPT else {}
            head = self.heads[key] = self(build_request(case, [], ()))
        return head

    def notes_head(self, case: dict, notes) -> int:
        """self(build_request(case, [], notes)), a pair case's two messages summed as self sums them but not checked
        again: `notes` tries a block one line longer for each note, built of a loaded (so checked) case, and the request
        it keeps is counted whole when it is built (count_built, head). An agent case's is counted whole."""
        request = build_request(case, [], notes)
        if not self.fast or is_agent(case):
            return self(request)
        return self.fixed + sum(self.message_size(*ROLE_AND_TEXT(message)) for message in request)

    def additive(self, case: dict) -> bool:
        """Whether count_built sums this pair case's requests from their parts, under a counter whose special tokens
        split a prompt cleanly (a rules process may then sum them itself, rules_process.RemoteCount)."""
        return self.fast and not is_agent(case)

    def known_sizes(self, messages) -> list[int] | None:
        """Cached sizes of a well-formed request's messages, None if one was not seen or it may be malformed: every
        count's hot path, C-level maps over the request."""
        if type(messages) is not list or not messages:
            return None
        try:
            sizes = list(map(self.sizes.get, map(ROLE_AND_TEXT, messages)))
        except (KeyError, TypeError):
            return None
        roles = list(map(ROLE, messages))
        if set(map(len, messages)) != {2} or 'system' in roles[1:] or ('assistant',) * 2 in zip(roles, roles[1:]):
            return None
        return None if None in sizes else sizes

    def message_size(self, role: str, content: str, keep: bool = False) -> int:
        """Tokens of one checked message's span, encoded once. A message of several lines is summed from its
        lines' tokens and kept whole only if `keep` (a turn is; a notes block, which grows a line at a time, is not)."""
        role, content = str.__str__(role), str.__str__(content)  # exact strs: a Markup would render escaped
        if (size := self.sizes.get((role, content))) is None:
            self.refuse(content)
            text = frame_span(self.form, role, content)
            several = '\n' in content.strip() and self.lines_apart
            size = sum(map(self.line_size, self.lines_apart.split(text))) if several else len(self.encode(text))
            if keep or not several:
                self.sizes[role, content] = size
        return size

    def line_size(self, line: str) -> int:
        if (size := self.lines.get(line)) is None:
            size = self.lines[line] = len(self.encode(line))
        return size

    def rendered(self, render, *args) -> str:
        """What tool_formats renders in this counter's format, refused if it holds text the vocab reads otherwise."""
        self.refuse(text := render(self.name, self.form, *args))
        return text

    def turn_costs(self, history: list) -> list[int]:
        """Tokens each turn (its user and assistant message, or an agent turn's messages) adds to any request,
        worked out once per conversation: cases of one conversation, and copies of it, share one entry."""
        if not self.fast:
            raise CounterError('this tokenizer cannot be counted turn by turn')
        return shared_costs(history, self)  # the cases sharing a history list find it without reading its turns

    def costs_by_text(self, history: list) -> list[int]:
        key = each_turn(turn_key, history)
        if (costs := self.turns.get(key)) is None:
            costs = [len(self.encode(self.rendered(turn_prompt_text, turn))) for turn in history] \
                if history and type(history[0]) is list else self.pair_costs(key)  # agent turns are rendered whole
            if len(self.turns) >= HISTORIES_KEPT:
                del self.turns[next(iter(self.turns))]  # the oldest
            self.turns[key] = costs
        return costs

    def pair_costs(self, pairs: tuple[tuple[str, str], ...]) -> list[int]:
        """Each (user, assistant) pair's two messages, counted once and kept."""
        for index, (_, answer) in enumerate(pairs):  # as checked() refuses it, so the cache never holds it
            refuse_thinking(f'history[{index}]: assistant content', answer)
        return [self.message_size('user', user, keep=True) + self.message_size('assistant', answer, keep=True)
                for user, answer in pairs]

    def forget(self) -> None:
        """Empty every cache, the BPE model's too, as in a fresh process (benchmark.py times from here)."""
        self.sizes.clear(), self.lines.clear(), self.turns.clear(), self.heads.clear()
        self.tokenizer.model._clear_cache()
        shared_costs.cache_clear()


@per_history
def shared_costs(history: list, counter: TokenCounter) -> list[int]:
    return counter.costs_by_text(history)


def splits_cleanly(tokenizer, form: dict) -> bool:
    """True when counting span by span gives the full count: every added token is matched as-is (no lstrip,
    single_word or normalisation) and is `<...>` with no other '<' or '>' inside, so none can straddle a cut, and the
    format's markers are tokens that start every span and the generation prompt, so every cut falls right before one
    (whitespace a token takes after itself, as Phi-3's do, lies inside its own span)."""
    added = tokenizer.get_added_tokens_decoder().values()
    texts = {token.content for token in added}
    starts = [form['suffix'], *form['open'].values()]
    return not any(token.lstrip or token.single_word or token.normalized for token in added) \
        and all(text.startswith('<') and text.endswith('>') and not {'<', '>'} & set(text[1:-1]) for text in texts) \
        and markers(form) <= texts and all(MARKER.match(text) and MARKER.match(text)[0] in texts for text in starts)


def line_cuts(tokenizer) -> re.Pattern | None:
    """Where a text's tokens are those of its lines, None if nowhere; only for a BPE without dropout whose added
    tokens take no whitespace after them (one would take a cut-off line's leading spaces). LINE_START when no token
    holds a newline beside another character and nothing can join a cut's two sides: the normalizer at most a Replace
    and the pre-tokenizer at most a Split, neither of strings with a newline, no word marks, no whole-word look-ups
    (Gemma 4's). LINE_BEFORE_TEXT for a byte-level BPE whose split is one of LINE_SAFE_SPLITS, after at most NFC,
    which composes nothing with a newline (Llama 3's, Qwen 2's; docs/counters.md says why)."""
    from tokenizers.models import BPE

    def newline_free(part: dict | None, kind: str) -> bool:  # absent, or a `kind` whose strings hold no newline
        return part is None or part.get('type') == kind and not part.get('invert') \
            and set(part.get('pattern', {})) == {'String'} and '\n' not in part['pattern']['String'] \
            and '\n' not in part.get('content', '')

    model = tokenizer.model
    normalizer, splitter = (None if part is None else json.loads(part.__getstate__())  # as tokenizer.json has them
                            for part in (tokenizer.normalizer, tokenizer.pre_tokenizer))
    if not isinstance(model, BPE) or model.dropout \
            or any(token.rstrip for token in tokenizer.get_added_tokens_decoder().values()):
        return None
    if not (model.continuing_subword_prefix or model.end_of_word_suffix or model.ignore_merges) \
            and newline_free(normalizer, 'Replace') and newline_free(splitter, 'Split') \
            and '\n' in (vocabulary := tokenizer.get_vocab(with_added_tokens=True)) \
            and not any('\n' in token and token.strip('\n') for token in vocabulary):
        return LINE_START
    parts = (splitter or {}).get('pretokenizers') or []
    if len(parts) != 2 or normalizer not in (None, {'type': 'NFC'}):
        return None
    split, byte_level = parts
    safe = split.get('pattern', {}).get('Regex') in LINE_SAFE_SPLITS \
        and (split.get('type'), split.get('behavior'), split.get('invert')) == ('Split', 'Isolated', False) \
        and (byte_level.get('type'), byte_level.get('add_prefix_space'), byte_level.get('use_regex')) \
        == ('ByteLevel', False, False)
    return LINE_BEFORE_TEXT if safe else None


def counter(name: str | None = None) -> TokenCounter:
    """The one way to get a counter: the one named, else the one chosen (choose_counter, --counter; the default
    unless named), loaded on first use and kept for the process. Rules count with it: counter()(messages) -> int."""
    name = name or SELECTED['name']
    if name not in LOADED:
        LOADED[name] = TokenCounter(name=name)
    return LOADED[name]


def choose_counter(name: str) -> None:  # a name counter_choice accepted
    SELECTED['name'] = name


def counter_choice(text: str) -> str:
    """--counter's value: a counter's name; `list` prints every counter and what it pins, and exits, as --help does."""
    manifest, manifest_sha256 = read_manifest()
    if text == 'list':
        print(counter_list(manifest, manifest_sha256), end='')
        raise SystemExit(0)
    if text not in manifest['counters']:
        raise CounterError(f"--counter {text}: no such counter; the counters are: {', '.join(manifest['counters'])}"
                           ' (or list)')
    return text


def add_counter_option(parser) -> None:
    parser.add_argument('--counter', metavar='NAME', type=counter_choice, default=DEFAULT,
                        help=f'count with this model\'s counter (default: {DEFAULT}); list names every counter, what '
                             'it pins and whether it is prepared (docs/counters.md)')


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Print the counter's profile and the token count of a small example "
                                     'request: a quick check that `.venv/bin/python prepare.py` worked. Reads '
                                     f'prepared/ (set {PREPARED_ENV} to read another prepared folder).')
    add_counter_option(parser)
    choose_counter(parser.parse_args(argv).counter)
    example = [{'role': 'system', 'content': 'Answer only from the conversation. If a fact is missing, say so.'},
               {'role': 'user', 'content': 'Which database will we use?'}]
    print(json.dumps({'profile': counter().profile(), 'example_tokens': counter()(example)}, indent=2))
    return 0


if __name__ == '__main__':
    run(main)
