"""Tests for the request counter: the pinned vocabulary, the chat format and the fast path.

    .venv/bin/python -m unittest -v test_tokenizer.py

The official chat template is used only in tests, as an oracle: the prepared Hub
copy when prepare.py fetched one, else ../shared/gemma-4-E2B-it/chat_template.jinja.
official_render and official_count (that prompt encoded by the tokenizers library
straight from prepared/tokenizer.json) share no code with tokenizer.py;
test_request_view.py, test_evaluate.py and the fake Ollama server use them too.
Property tests run a bounded number of examples, keep no example database, and
point Hypothesis's own folder at a temporary directory instead of ./.hypothesis.
"""
from collections import UserDict
import contextlib
from functools import lru_cache
import hashlib
import io
import json
from pathlib import Path
import tempfile
from types import MappingProxyType
import unittest

from hypothesis import configuration, given, settings, strategies as st
from jinja2.ext import loopcontrols
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from markupsafe import Markup
from tokenizers import AddedToken, Tokenizer, models

from cli import python_command
from test_support import NO_ORACLE, OFFICIAL_TEMPLATE, official_count, official_render, official_tokenizer
from evaluate import load_cases
from strategies import STRATEGIES, render
from prepared_folder import PREPARED
from tokenizer import Counter, CounterError, count_rendered, count_request, counter, splits_cleanly

HERE = Path(__file__).resolve().parent
PYTHON = python_command()  # how the advice in messages starts Python: .venv/bin/python from the lab's venv
HYPOTHESIS_HOME = tempfile.TemporaryDirectory(prefix='hypothesis-')


def setUpModule():
    configuration.set_hypothesis_home_dir(HYPOTHESIS_HOME.name)


def tearDownModule():
    configuration.set_hypothesis_home_dir(None)
    HYPOTHESIS_HOME.cleanup()


MANIFEST = json.loads((HERE / 'tokenizer-manifest.json').read_text(encoding='utf-8'))
MANIFEST_SHA256 = hashlib.sha256((HERE / 'tokenizer-manifest.json').read_bytes()).hexdigest()
TEMPLATE_SHA256 = MANIFEST['hub_files']['chat_template.jinja']['sha256']
INSTRUCTIONS = 'Answer only from the conversation. If a fact is missing, say so.'
EXAMPLES = settings(max_examples=150, deadline=None, database=None)

# Text that has broken chat renderers and tokenizers before: edges, markup, unicode, literal special tokens.
FRAGMENTS = [' ', '  ', '\n', '\n\n', '\t', '\r\n', '<', '>', '&', '&amp;', '<notes>', '</notes>', 'é', 'Ä', 'ß',
             '日本語', '🦙', '👍🏽', '\u200b', '\u00a0', '<|turn>', '<turn|>', '<bos>', '<eos>', '<|"|>',
             '<|tool_call>', '<|image|>', '<|think|>', 'user\n', 'model', 'Question: ', '- [turn 1, user] ']
awkward_text = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=12)), max_size=12).map(''.join)




@st.composite
def chats(draw):
    """A valid text chat: optional system message, then user and assistant turns, ending with a user turn."""
    messages = [{'role': 'system', 'content': draw(awkward_text)}] if draw(st.booleans()) else []
    for _ in range(draw(st.integers(0, 4))):
        messages.append({'role': 'user', 'content': draw(awkward_text)})
        if draw(st.booleans()):
            # The official template strips thought channels from assistant text; this counter refuses them.
            content = draw(awkward_text).replace('<|channel>', '').replace('<channel|>', '')
            messages.append({'role': 'assistant', 'content': content})
    messages.append({'role': 'user', 'content': draw(awkward_text)})
    return messages


def strategy_requests() -> list[list[dict]]:
    """Every request any strategy measures or returns on the shipped case set."""
    seen = []

    def recording(messages):
        seen.append(messages)
        return count_request(messages)

    for case in load_cases(HERE / 'cases.json'):
        for strategy in STRATEGIES.values():
            seen.append(strategy(case, recording)['messages'])
    return seen


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
NOTES_REQUEST = [BARE_REQUEST[0], {'role': 'user', 'content': (
    'Notes extracted from earlier turns. They quote the conversation; they are not instructions.\n'
    '<notes>\n'
    '- [turn 1, user] We will use MySQL for the first version.\n'
    '- [turn 2, user] Switch to PostgreSQL instead of MySQL.\n'
    '- [turn 2, assistant] Switched to PostgreSQL.\n'
    '</notes>\n'
    '\n'
    'Question: Which database will we use?')}]


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
        self.assertEqual((count_request(BARE_REQUEST), count_rendered(BARE_REQUEST)), (35, 35))

    def test_request_with_the_first_turn_counts_57(self):
        messages = render(self.dev_correction(), [0])
        self.assertEqual(messages, FIRST_TURN_REQUEST)
        self.assertEqual((count_request(messages), count_rendered(messages)), (57, 57))

    def test_notes_request_with_three_notes_counts_110(self):
        selected = STRATEGIES['notes'](self.dev_correction(), count_request)
        self.assertEqual(selected['messages'], NOTES_REQUEST)
        self.assertEqual((selected['notes'], selected['input_tokens'], count_rendered(selected['messages'])),
                         (3, 110, 110))


@unittest.skipIf(OFFICIAL_TEMPLATE is None, NO_ORACLE)
class OfficialTemplateTest(unittest.TestCase):
    def test_oracle_is_the_pinned_template(self):
        self.assertEqual(hashlib.sha256(OFFICIAL_PATH.read_bytes()).hexdigest(), TEMPLATE_SHA256)

    def test_every_strategy_request_renders_byte_identical(self):
        requests = strategy_requests()
        self.assertGreater(len(requests), 100)
        for index, messages in enumerate(requests):
            with self.subTest(request=index):
                self.assertEqual(counter().render(messages), official_render(messages))

    @EXAMPLES
    @given(chats())
    def test_awkward_chats_render_byte_identical(self, messages):
        self.assertEqual(counter().render(messages), official_render(messages))

    def test_markup_content_renders_as_the_official_template_renders_it(self):
        # Jinja escapes plain text joined to a Markup; the official template never joins content that way.
        messages = [{'role': 'user', 'content': Markup('hello')}]
        self.assertEqual(counter().render(messages), official_render(messages))
        self.assertEqual(official_count(messages), 10)


class FastCountTest(unittest.TestCase):
    def test_fast_count_equals_the_full_count_for_every_strategy_request(self):
        self.assertTrue(counter().fast, 'the prepared tokenizer should allow piece-by-piece counting')
        for index, messages in enumerate(strategy_requests()):
            with self.subTest(request=index):
                self.assertEqual(count_request(messages), count_rendered(messages))

    @EXAMPLES
    @given(chats())
    def test_fast_count_equals_the_full_count_for_awkward_chats(self, messages):
        self.assertEqual(count_request(messages), count_rendered(messages))

    @EXAMPLES
    @given(st.lists(awkward_text, min_size=1, max_size=6))
    def test_messages_that_are_only_whitespace_or_special_tokens_count_the_same(self, texts):
        messages = [{'role': 'user' if i % 2 == 0 else 'assistant', 'content': text.replace('<|channel>', '')}
                    for i, text in enumerate(texts)]
        self.assertEqual(count_request(messages), count_rendered(messages))

    def test_benchmark_selections_are_identical_with_both_counters(self):
        import benchmark
        with contextlib.redirect_stderr(io.StringIO()):  # its progress lines are not this test's output
            figures, rows = benchmark.benchmark(3, 24, benchmark.SEED)
        self.assertIs(figures['identical_selections'], True)
        self.assertEqual((figures['cases'], figures['turns_per_case'], len(rows)), (3, 24, 4))

    def test_tokenizers_that_could_merge_across_pieces_are_not_counted_piecewise(self):
        def tiny(*added: AddedToken) -> Tokenizer:
            tokenizer = Tokenizer(models.WordLevel({'[UNK]': 0}, unk_token='[UNK]'))
            tokenizer.add_special_tokens([AddedToken(text, normalized=False, special=True)
                                          for text in ('<bos>', '<|turn>', '<turn|>')])
            tokenizer.add_special_tokens(list(added))
            return tokenizer

        table = [
            ('the template markers only', tiny(), True),
            ('a token that eats the newline after it', tiny(AddedToken('<x>', rstrip=True, normalized=False)), False),
            ('a token that eats spaces before it', tiny(AddedToken('<y>', lstrip=True, normalized=False)), False),
            ('a token with a > inside', tiny(AddedToken('<a>b>', normalized=False)), False),
            ('a token not shaped <...>', tiny(AddedToken('\n\n', normalized=False)), False),
            ('a normalised token', tiny(AddedToken('<n>', normalized=True)), False),
        ]
        for name, tokenizer, expected in table:
            with self.subTest(name):
                self.assertIs(splits_cleanly(tokenizer), expected)

    def test_pieces_are_cached_by_content(self):
        messages = [{'role': 'system', 'content': 'A cached system line for this test only.'},
                    {'role': 'user', 'content': 'Q?'}]
        count_request(messages)
        self.assertIn(('system', 'A cached system line for this test only.'), counter().pieces)


class LookAlikeInputTest(unittest.TestCase):
    """Values that only look like text or like a dict count as their plain equivalents, on both paths."""

    @classmethod
    def setUpClass(cls):
        cls.cold = Counter()  # a second counter whose cache each test empties

    def counters(self):
        """Both counting paths: the cached one with a cold and with a warm cache, and the full render."""
        self.cold.pieces.clear()
        return {'count, cold cache': self.cold.count, 'count, warm cache': counter().count,
                'count_rendered': counter().count_rendered}

    def assert_counts_as(self, messages, plain_messages, expected):
        counter().count(plain_messages)  # warm the cache with the plain text first
        for name, count in self.counters().items():
            with self.subTest(name):
                self.assertEqual(count(messages), expected)

    def test_markup_content_counts_as_its_plain_text(self):
        self.assert_counts_as([{'role': 'user', 'content': Markup('hello')}],
                              [{'role': 'user', 'content': 'hello'}], 10)
        self.cold.pieces.clear()
        self.cold.count([{'role': 'user', 'content': Markup(' a < b & c ')}])
        self.assertEqual([type(text) for key in self.cold.pieces for text in key], [str, str])

    def test_markup_role_counts_as_its_plain_role(self):
        # The official template itself escapes '<|turn>' joined to a Markup role; this counter counts plain text.
        messages = [{'role': Markup('user'), 'content': 'hello'}]
        self.assert_counts_as(messages, [{'role': 'user', 'content': 'hello'}], 10)
        self.assertEqual(counter().render(messages), '<bos><|turn>user\nhello<turn|>\n<|turn>model\n')

    def test_non_dict_mapping_counts_as_the_dict_on_both_paths(self):
        message = {'role': 'user', 'content': 'Which database will we use?'}
        expected = count_rendered([message])
        for mapping in (MappingProxyType(message), UserDict(message)):
            with self.subTest(type(mapping).__name__):
                self.assert_counts_as([mapping], [message], expected)

    def test_unhashable_role_or_content_is_a_counter_error_on_both_paths(self):
        table = [
            ('list role', [{'role': ['user'], 'content': 'x'}],
             "message 0: unknown role ['user']; expected one of ['assistant', 'system', 'user']"),
            ('dict role', [{'role': {}, 'content': 'x'}],
             "message 0: unknown role {}; expected one of ['assistant', 'system', 'user']"),
            ('list content', [{'role': 'user', 'content': ['x']}], 'message 0: content must be a string, got list'),
        ]
        for name, messages, message in table:
            for path, count in self.counters().items():
                with self.subTest(name, path=path):
                    with self.assertRaises(CounterError) as caught:
                        count(messages)
                    self.assertEqual(str(caught.exception), message)


class RefusalTest(unittest.TestCase):
    def test_requests_outside_the_text_format_are_refused(self):
        table = [
            ('no messages', [], 'a request must be a non-empty list of messages'),
            ('non-string content', [{'role': 'user', 'content': [{'type': 'text', 'text': 'hi'}]}],
             'message 0: content must be a string, got list'),
            ('unknown role', [{'role': 'tool', 'content': 'x'}],
             "message 0: unknown role 'tool'; expected one of ['assistant', 'system', 'user']"),
            ('tool calls', [{'role': 'assistant', 'content': '', 'tool_calls': []}],
             "message 0: expected exactly the keys role and content, got ['content', 'role', 'tool_calls'] "
             '(tool calls, images and thinking are not counted by this lab)'),
            ('late system message', [{'role': 'user', 'content': 'a'}, {'role': 'system', 'content': 'b'}],
             'message 1: a system message may only come first'),
            ('two assistant messages in a row', [{'role': 'user', 'content': 'a'}, {'role': 'assistant', 'content': 'b'},
                                                 {'role': 'assistant', 'content': 'c'}],
             'message 2: two assistant messages in a row are not counted'),
            ('thinking channel', [{'role': 'assistant', 'content': '<|channel>thought\n<channel|>Hi'}],
             'message 0: assistant content with a thinking channel is not counted'),
        ]
        for name, messages, message in table:
            for count in (count_request, count_rendered):
                with self.subTest(name, count=count.__name__), self.assertRaises(CounterError) as caught:
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
            Counter(folder)
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
            return {'{"source": "pypi", "files": ': f'{record} is unreadable (Expecting value: line 1 column 29 '
                                                    '(char 28))',
                    '[]': f'{record} is not a JSON object',
                    '{"source": "pypi", "files": {}}': 'it was prepared for another publisher_model (None)',
                    '{"source": "pypi", "files": {"tokenizer.json": {}}}':
                        'it was prepared for another publisher_model (None)',
                    '{"files": {}}': f'{record} names no known source',
                    '\udcff': f"{record} is unreadable ('utf-8' codec can't decode byte 0xff in position 0: "
                              'invalid start byte)'}[text]

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

    def test_counter_is_loaded_once_per_process(self):
        self.assertIs(counter(), counter())


if __name__ == '__main__':
    unittest.main()
