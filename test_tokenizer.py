"""Tests for the request counter: the pinned vocabulary, the chat format, and every counting path.

    .venv/bin/python -m unittest -v test_tokenizer.py

The official chat template is used only in tests, as an oracle (test_support.py:
official_render, and official_count, that prompt encoded by the tokenizers library
straight from prepared/tokenizer.json; neither shares code with tokenizer.py).
Every way the lab counts (a cold and a warm cache, notes blocks measured a line at
a time or whole, the whole-prompt path, a request as the sum of its turns' costs)
is held to it. Each test is named after the failure it pins. Property tests run a
bounded number of examples, keep no example database, and point Hypothesis's own
folder at a temporary directory instead of ./.hypothesis.
"""
from collections import UserDict
import contextlib
import hashlib
import json
from pathlib import Path
import tempfile
from types import MappingProxyType
import unittest

from hypothesis import given, strategies as st
from markupsafe import Markup
from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers

from case_set import load_cases
from prepared_folder import PREPARED
from strategies import RULES, build_request
from test_support_fixtures import (DEV_CORRECTION_NOTES, HERE, MANIFEST, MANY_EXAMPLES, PATHS, PYTHON, assistant_text,
                                   awkward_text, conversations, counted, counting_path,
                                   hypothesis_home_outside_the_tree as setUpModule, rule_requests)
from test_support_oracle import NO_ORACLE, OFFICIAL_PATH, OFFICIAL_TEMPLATE, official_count, official_render
from tokenizer import LINE_START, CounterError, TokenCounter, counter, line_cuts, splits_cleanly

MANIFEST_SHA256 = hashlib.sha256((HERE / 'tokenizer-manifest.json').read_bytes()).hexdigest()
TEMPLATE_SHA256 = MANIFEST['hub_files']['chat_template.jinja']['sha256']
INSTRUCTIONS = 'Answer only from the conversation. If a fact is missing, say so.'


@st.composite
def chats(draw):
    """A valid text chat: optional system message, then user and assistant turns, ending with a user turn."""
    messages = [{'role': 'system', 'content': draw(awkward_text)}] if draw(st.booleans()) else []
    for _ in range(draw(st.integers(0, 4))):
        messages.append({'role': 'user', 'content': draw(awkward_text)})
        if draw(st.booleans()):
            messages.append({'role': 'assistant', 'content': draw(assistant_text)})
    messages.append({'role': 'user', 'content': draw(awkward_text)})
    return messages


class VocabularyTest(unittest.TestCase):
    def test_official_vectors_reproduce(self):
        record = json.loads((PREPARED / 'prepared.json').read_text(encoding='utf-8'))
        if record['source'] != 'pypi':
            self.skipTest('prepared from the Hub: the 46 vectors ship only with the PyPI mirror')
        separator = '\n' + MANIFEST['pypi_mirror']['vector_separator'] + '\n'
        inputs = (PREPARED / 'vocab-vectors.inp').read_text(encoding='utf-8').split(separator)
        outputs = (PREPARED / 'vocab-vectors.out').read_text(encoding='utf-8').removesuffix('\n').split('\n')
        self.assertEqual((len(inputs), len(outputs)), (46, 46))
        for index, (text, ids) in enumerate(zip(inputs, outputs)):
            with self.subTest(vector=index, text=text[:30]):
                self.assertEqual(counter().encode(text), [int(token) for token in ids.split()])

    def test_vocabulary_has_the_pinned_size_and_special_tokens(self):
        tokenizer = counter().tokenizer
        self.assertEqual(tokenizer.get_vocab_size(with_added_tokens=True), MANIFEST['pypi_mirror']['vocab_tokens'])
        for text, token_id in (('<bos>', 2), ('<|turn>', 105), ('<turn|>', 106)):
            with self.subTest(text):
                self.assertEqual(counter().encode(text), [token_id])


# dev-correction's requests behind the reference figures, written out by hand (the notes one as the README shows it).
BARE_REQUEST = [{'role': 'system', 'content': INSTRUCTIONS}, {'role': 'user', 'content': 'Which database will we use?'}]
FIRST_TURN_REQUEST = [BARE_REQUEST[0], {'role': 'user', 'content': 'We will use MySQL for the first version.'},
                      {'role': 'assistant', 'content': 'MySQL noted.'}, BARE_REQUEST[1]]
NOTES_REQUEST = [BARE_REQUEST[0], {'role': 'user', 'content': DEV_CORRECTION_NOTES}]


class ReferenceFiguresTest(unittest.TestCase):
    def dev_correction(self) -> dict:
        return {case['id']: case for case in load_cases(HERE / 'cases.json')}['dev-correction']

    @unittest.skipIf(OFFICIAL_TEMPLATE is None, NO_ORACLE)
    def test_the_official_template_and_tokenizer_give_the_reference_figures(self):
        # The oracle itself is checked against the hand-written figures, so a broken oracle cannot pass the
        # counter (or the fake Ollama server, which counts with it).
        self.assertEqual([official_count(messages) for messages in (BARE_REQUEST, FIRST_TURN_REQUEST, NOTES_REQUEST)],
                         [35, 57, 110])

    def test_bare_request_counts_35(self):
        self.assertEqual(build_request(self.dev_correction(), []), BARE_REQUEST)
        self.assertEqual(counter()(BARE_REQUEST), 35)

    def test_request_with_the_first_turn_counts_57_and_the_turn_adds_22(self):
        case = self.dev_correction()
        self.assertEqual(build_request(case, [0]), FIRST_TURN_REQUEST)
        self.assertEqual((counter()(FIRST_TURN_REQUEST), counter().turn_costs(case['history'])[0]), (57, 22))

    def test_notes_request_with_three_notes_counts_110(self):
        selected = RULES['notes'](self.dev_correction(), counter())
        self.assertEqual(selected['messages'], NOTES_REQUEST)
        self.assertEqual((selected['turns'], selected['notes'], selected['input_tokens']), ([], 3, 110))


@unittest.skipIf(OFFICIAL_TEMPLATE is None, NO_ORACLE)
class OfficialTemplateTest(unittest.TestCase):
    def test_oracle_is_the_pinned_template(self):
        self.assertEqual(hashlib.sha256(OFFICIAL_PATH.read_bytes()).hexdigest(), TEMPLATE_SHA256)

    def test_every_rule_request_renders_and_counts_as_the_official_template(self):
        requests = rule_requests(counter())
        self.assertGreater(len(requests), 100)
        for index, messages in enumerate(requests):
            with self.subTest(request=index):
                self.assertEqual(counter().prompt(messages), official_render(messages))
                self.assertEqual(counter()(messages), official_count(messages))

    @MANY_EXAMPLES
    @given(chats(), conversations())
    def test_every_counting_path_gives_the_official_count(self, messages, case):
        self.assertEqual(counter().prompt(messages), official_render(messages))
        expected = official_count(messages)
        for path in PATHS:  # no subTest under Hypothesis: it would keep a failure from reaching the shrinker
            self.assertEqual(counted(path, messages), expected, path)
        # A request is its bare count plus what each of its turns adds: what every rule decides by.
        whole = official_count(build_request(case, range(len(case['history']))))
        with counting_path('cold cache') as count:
            self.assertEqual(count(build_request(case, [])) + sum(count.turn_costs(case['history'])), whole)

    def test_markup_content_renders_as_the_official_template_renders_it(self):
        # Jinja escapes plain text joined to a Markup; the official template never joins content that way.
        messages = [{'role': 'user', 'content': Markup('hello')}]
        self.assertEqual(counter().prompt(messages), official_render(messages))
        self.assertEqual(official_count(messages), 10)


class SplitTest(unittest.TestCase):
    """The fast path is taken only where the sums are exact; the official-template tests above hold it to them."""

    def test_the_pinned_tokenizer_is_counted_piece_by_piece_and_line_by_line(self):
        self.assertIs(counter().fast, True)
        self.assertIs(line_cuts(counter().tokenizer), LINE_START)

    @unittest.skipIf(OFFICIAL_TEMPLATE is None, NO_ORACLE)
    def test_a_request_counted_from_the_turns_it_is_built_of_is_the_official_count(self):
        # count_built sums the head and the cached turn costs; the official template renders the whole request.
        lines = ['- [turn 1, user] We must ship <b> by Friday.', '- [turn 2, assistant] Noted.']
        for case in load_cases(HERE / 'cases.json')[:4]:
            for kept, notes in (([], ()), ([1, 0], lines), (range(len(case['history'])), lines)):
                with self.subTest(case=case['id'], kept=kept, notes=notes):
                    request = build_request(case, kept, notes)
                    self.assertEqual(counter().count_built(request, case, kept, notes), official_count(request))

    def test_tokenizers_that_could_merge_across_pieces_are_not_counted_piecewise(self):
        def tiny(*added: AddedToken) -> Tokenizer:
            tokenizer = Tokenizer(models.WordLevel({'[UNK]': 0}, unk_token='[UNK]'))
            tokenizer.add_special_tokens([AddedToken(text, normalized=False, special=True)
                                          for text in ('<bos>', '<|turn>', '<turn|>')])
            tokenizer.add_special_tokens(list(added))
            return tokenizer

        gemma = MANIFEST['counters']['gemma-4-e2b']['format']
        unmarked = gemma | {'open': gemma['open'] | {'user': 'user\n'}}  # a span that starts with plain text
        table = [
            ('the template markers only', tiny(), gemma, True),
            # Whitespace after a token stays in the token's span, since every span starts with a special token.
            ('a token that takes the whitespace after it', tiny(AddedToken('<x>', rstrip=True, normalized=False)),
             gemma, True),
            ('a token that eats spaces before it', tiny(AddedToken('<y>', lstrip=True, normalized=False)), gemma, False),
            ('a token with a > inside', tiny(AddedToken('<a>b>', normalized=False)), gemma, False),
            ('a token not shaped <...>', tiny(AddedToken('\n\n', normalized=False)), gemma, False),
            ('a normalised token', tiny(AddedToken('<n>', normalized=True)), gemma, False),
            ('a span that does not start with a special token', tiny(), unmarked, False),
            ('a marker the vocabulary lacks', tiny(), gemma | {'close': '<end_of_turn>\n'}, False),
        ]
        for name, tokenizer, form, expected in table:
            with self.subTest(name):
                self.assertIs(splits_cleanly(tokenizer, form), expected)

    def test_tokenizers_that_could_merge_across_a_line_start_are_measured_whole(self):
        def tiny(vocabulary: list[str], merges: list[tuple[str, str]] = (), normalizer=None, splitter=None,
                 **options):
            tokenizer = Tokenizer(models.BPE({token: i for i, token in enumerate(vocabulary)}, list(merges), **options))
            if normalizer:
                tokenizer.normalizer = normalizer
            if splitter:
                tokenizer.pre_tokenizer = splitter
            return tokenizer

        table = [
            ('newline runs on their own', tiny(['a', '\n', '\n\n'], [('\n', '\n')]), True),
            ('a token holding a newline and a letter', tiny(['a', '\n', '\na'], [('\n', 'a')]), False),
            ('a letter and a newline', tiny(['a', '\n', 'a\n'], [('a', '\n')]), False),
            ('no newline token at all', tiny(['a']), False),
            ('a normalizer that makes newlines', tiny(['a', '\n'], normalizer=normalizers.Replace(' ', '\n')), False),
            ('a normalizer of another kind', tiny(['a', '\n'], normalizer=normalizers.NFKC()), False),
            ('a pre-tokenizer of another kind', tiny(['a', '\n'], splitter=pre_tokenizers.Whitespace()), False),
            ('whole words looked up before merging', tiny(['a', '\n'], ignore_merges=True), False),
            ('an end-of-word suffix', tiny(['a', '\n'], end_of_word_suffix='</w>'), False),
            ('a word-level model', Tokenizer(models.WordLevel({'a': 0, '\n': 1}, unk_token='a')), False),
            ('a token that takes the whitespace after it', taking_whitespace(tiny(['a', '\n'])), False),
        ]
        for name, tokenizer, expected in table:
            with self.subTest(name):
                self.assertIs(line_cuts(tokenizer), LINE_START if expected else None)


def taking_whitespace(tokenizer: Tokenizer) -> Tokenizer:
    # '<x>\n  a' cut after the newline: the token takes '\n  ' in the whole, only '\n' in its own line.
    tokenizer.add_special_tokens([AddedToken('<x>', rstrip=True, normalized=False)])
    return tokenizer


class LookAlikeInputTest(unittest.TestCase):
    """Values that only look like text or like a dict count as their plain equivalents, on every path.

    Hand-worked: a request of one user message costs 4 fixed tokens (<bos>, and <|turn> `model` `\\n` at the
    end), 3 for the message (<|turn>, <turn|>, `\\n`) and its piece: `user\\nhello` is 3 tokens (10 in all),
    `user\\nWhich database will we use?` 8 (15 in all).
    """

    def assert_counts_as(self, messages, expected: int):
        for path in PATHS:
            with self.subTest(path):
                self.assertEqual(counted(path, messages), expected)

    def test_markup_content_counts_as_its_plain_text(self):
        self.assert_counts_as([{'role': 'user', 'content': Markup('hello')}], 10)
        with counting_path('cold cache') as count:
            count([{'role': 'user', 'content': Markup(' a < b & c ')}])
            self.assertEqual([type(text) for key in count.sizes for text in key], [str, str])

    def test_markup_role_counts_as_its_plain_role(self):
        # The official template itself escapes '<|turn>' joined to a Markup role; this counter counts plain text.
        messages = [{'role': Markup('user'), 'content': 'hello'}]
        self.assert_counts_as(messages, 10)
        self.assertEqual(counter().prompt(messages), '<bos><|turn>user\nhello<turn|>\n<|turn>model\n')

    def test_non_dict_mapping_counts_as_the_dict_on_every_path(self):
        message = {'role': 'user', 'content': 'Which database will we use?'}
        for mapping in (MappingProxyType(message), UserDict(message)):
            with self.subTest(type(mapping).__name__):
                self.assert_counts_as([mapping], 15)

    def test_unhashable_role_or_content_is_a_counter_error_on_every_path(self):
        table = [
            ('list role', [{'role': ['user'], 'content': 'x'}],
             "message 0: unknown role ['user']; expected one of ['system', 'user', 'assistant', 'tool']"),
            ('dict role', [{'role': {}, 'content': 'x'}],
             "message 0: unknown role {}; expected one of ['system', 'user', 'assistant', 'tool']"),
            ('list content', [{'role': 'user', 'content': ['x']}], 'message 0: content must be a string, got ["x"]'),
        ]
        for name, messages, message in table:
            for path in PATHS:
                with self.subTest(name, path=path), self.assertRaises(CounterError) as caught:
                    counted(path, messages)
                self.assertEqual(str(caught.exception), message)


class RefusalTest(unittest.TestCase):
    def test_a_thinking_channel_in_a_history_is_refused_by_turn_costs_so_no_later_count_finds_it_cached(self):
        history = [{'user': 'Hi', 'assistant': 'Fine.'}, {'user': 'Q', 'assistant': '<|channel>thought\n<channel|>A'}]
        with self.assertRaises(CounterError) as caught:
            counter().turn_costs(history)
        self.assertEqual(str(caught.exception), "history[1]: assistant content contains a thinking-channel marker "
                                                "['<|channel>', '<channel|>'], which the counter does not cover")
        with self.assertRaises(CounterError):
            counter()([{'role': 'user', 'content': 'Q'}, {'role': 'assistant', 'content': history[1]['assistant']},
                           {'role': 'user', 'content': 'Again?'}])

    def test_requests_outside_the_text_format_are_refused_even_when_each_message_was_counted_before(self):
        table = [
            ('no messages', [], 'a request must be a non-empty list of messages'),
            ('non-string content', [{'role': 'user', 'content': [{'type': 'text', 'text': 'hi'}]}],
             'message 0: content must be a string, got [{"type": "text", "text": "hi"}]'),
            ('unknown role', [{'role': 'developer', 'content': 'x'}],
             "message 0: unknown role 'developer'; expected one of ['system', 'user', 'assistant', 'tool']"),
            ('a tool message without its call id', [{'role': 'tool', 'content': 'x'}],
             "message 0: a tool message holds ['content', 'tool_call_id'] and may hold ['name'], got ['content']"),
            ('a tool message beside a non-message', [{'role': 'tool', 'tool_call_id': 'c', 'content': 'x'}, 'x'],
             'message 1: expected an object whose role is one of system, user, assistant, tool'),
            ('a call with string arguments', [{'role': 'user', 'content': 'a'}, {'role': 'assistant', 'content': '',
              'tool_calls': [{'id': 'c', 'type': 'function', 'function': {'name': 'f', 'arguments': '{}'}}]}],
             "message 1, tool call 0: arguments must be a JSON object, got str (parse a JSON string first: Gemma 4's "
             "template raises on one, Llama 3's and Qwen 2.5's encode it twice)"),
            ('an image', [{'role': 'user', 'content': 'a', 'images': ['x']}],
             "message 0: a user message holds ['content'] and may hold [], got ['content', 'images'] "
             '(images and thinking are not counted by this lab)'),
            ('late system message', [{'role': 'user', 'content': 'a'}, {'role': 'system', 'content': 'b'}],
             'message 1: a system message may only come first'),
            ('two assistant messages in a row', [{'role': 'user', 'content': 'a'}, {'role': 'assistant', 'content': 'b'},
                                                 {'role': 'assistant', 'content': 'c'}],
             'message 2: two assistant messages in a row are not counted'),
            ('thinking channel', [{'role': 'assistant', 'content': '<|channel>thought\n<channel|>Hi'}],
             "message 0: assistant content contains a thinking-channel marker ['<|channel>', '<channel|>'], which "
             'the counter does not cover'),
            ('a lone surrogate', [{'role': 'user', 'content': 'a\ud800'}],  # TypeError in the tokenizer before
             'message 0: holds a lone surrogate (half a UTF-16 pair), which is not text'),
        ]
        for name, messages, message in table:
            for path in PATHS:
                with self.subTest(name, path=path), counting_path(path) as count:
                    if path == 'warm cache':  # every message that can be counted alone already is
                        for single in messages:
                            with contextlib.suppress(CounterError):
                                count([single])
                    with self.assertRaises(CounterError) as caught:
                        count(messages)
                    self.assertEqual(str(caught.exception), message)


class PreparedFolderTest(unittest.TestCase):
    def prepared(self, folder: Path, source: str, content: bytes, recorded_sha256: str | None = None) -> Path:
        """A folder shaped like prepare.py's for `source`, whose tokenizer.json holds `content`."""
        names = ['tokenizer.json', 'chat_template.jinja'] if source == 'hub' else [
            'tokenizer.json', 'vocab-vectors.inp', 'vocab-vectors.out']
        files = {}
        for name in names:
            data = content if name == 'tokenizer.json' else name.encode()
            (folder / name).write_bytes(data)
            files[name] = {'size': len(data), 'sha256': hashlib.sha256(data).hexdigest()}
        if recorded_sha256:
            files['tokenizer.json']['sha256'] = recorded_sha256
        (folder / 'prepared.json').write_text(json.dumps({
            'source': source, 'publisher_model': MANIFEST['publisher_model'], 'revision': MANIFEST['revision'],
            'manifest_sha256': MANIFEST_SHA256, 'files': files, 'vectors_checked': 46}), encoding='utf-8')
        return folder

    def refusal(self, folder: Path) -> str:
        with self.assertRaises(CounterError) as caught:
            TokenCounter(folder)
        return str(caught.exception)

    def test_unprepared_folder_says_to_run_prepare(self):
        with tempfile.TemporaryDirectory() as folder:
            self.assertEqual(self.refusal(Path(folder)), f'the tokenizer is not prepared '
                                                          f'({Path(folder) / "prepared.json"} is missing): '
                                                          f'run `{PYTHON} prepare.py`')

    def test_a_prepared_file_changed_after_preparation_is_refused(self):
        with tempfile.TemporaryDirectory() as name:
            folder = self.prepared(Path(name), 'pypi', b'{"changed": true}', recorded_sha256='0' * 64)
            self.assertEqual(self.refusal(folder), f'{folder} is not a valid prepared counter: '
                                                   f'{folder / "tokenizer.json"} no longer matches its recorded '
                                                   f'size and sha256; refusing to count: run `{PYTHON} prepare.py`')

    def test_a_tokenizer_that_is_not_the_pinned_one_is_refused(self):
        for source, pinned_at in (('hub', 'hub_files.tokenizer.json'), ('pypi', 'pypi_mirror.built_tokenizer')):
            with self.subTest(source), tempfile.TemporaryDirectory() as name:
                folder = self.prepared(Path(name), source, b'{"not": "pinned"}')
                self.assertEqual(self.refusal(folder), f'{folder} is not a valid prepared counter: '
                                                       f'{folder / "tokenizer.json"} does not match the manifest\'s '
                                                       f'sha256 ({pinned_at}); refusing to count: '
                                                       f'run `{PYTHON} prepare.py`')

    def test_a_folder_prepared_for_another_manifest_is_refused(self):
        with tempfile.TemporaryDirectory() as name:
            folder = self.prepared(Path(name), 'pypi', b'{}')
            record = json.loads((folder / 'prepared.json').read_text(encoding='utf-8'))
            (folder / 'prepared.json').write_text(json.dumps(record | {'manifest_sha256': '0' * 64}))
            self.assertEqual(self.refusal(folder), f'{folder} is not a valid prepared counter: the manifest '
                                                   'changed since it was prepared; refusing to count: '
                                                   f'run `{PYTHON} prepare.py`')

    def test_a_damaged_record_is_refused_without_a_traceback(self):
        def reason(record: Path, text: str) -> str:
            return {'{"source": "pypi", "files": ': f'{record}: invalid JSON at line 1 column 29: Expecting value',
                    '[]': f'{record} is not a JSON object',
                    '{"source": "pypi", "files": {}}': 'it was prepared for another publisher_model (None)',
                    '{"source": "pypi", "files": {"tokenizer.json": {}}}':
                        'it was prepared for another publisher_model (None)',
                    '{"files": {}}': f'{record} names no known source',
                    '\udcff': f"{record}: the prepared folder's record is not UTF-8 text (byte 0)"}[text]

        for text in ('{"source": "pypi", "files": ', '[]', '{"source": "pypi", "files": {}}', '{"files": {}}',
                     '{"source": "pypi", "files": {"tokenizer.json": {}}}', '\udcff'):
            with self.subTest(text), tempfile.TemporaryDirectory() as name:
                record = Path(name) / 'prepared.json'
                record.write_text(text, encoding='utf-8', errors='surrogateescape')
                self.assertEqual(self.refusal(Path(name)), f'{name} is not a valid prepared counter: '
                                                           f'{reason(record, text)}; refusing to count: '
                                                           f'run `{PYTHON} prepare.py`')

    def test_profile_names_the_pinned_model_and_format_not_the_source(self):
        self.assertEqual(counter().profile(), {
            'model': 'google/gemma-4-E2B-it',
            'revision': '3e22461f65e89153144f8adb70e3b8c2cc9845a7',
            'template_sha256': '0a2c8073c878ab1da004bee933a998606537bbb62016310352c7285c3f01c5b5',
            'enable_thinking': False,
            'count_scope': 'chat template with generation prefix; tokenizer files only, no inference',
        })


if __name__ == '__main__':
    unittest.main()
