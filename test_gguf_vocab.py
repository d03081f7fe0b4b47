"""Tests for gguf_vocab.py: tokenizers rebuilt from tiny GGUF vocabularies, each id worked out by hand; each test is
named after the failure it pins. (The real vocabularies are held to llama.cpp's test vectors by prepare.py, and the
prepared ones again by test_counters.py; the Gemma build by test_prepare_pypi.py.)

    .venv/bin/python -m unittest -v test_gguf_vocab.py
"""
from pathlib import Path
import tempfile
import unittest

from gguf import GGUFWriter
from tokenizers import Tokenizer

from gguf_vocab import PrepareError, build_tokenizer, check_markers, check_vectors, merges_by_score
from test_support_fixtures import MANIFEST
from tokenizer import SPLIT

NORMAL, CONTROL = 1, 3  # GGUF token types
# A tiny SentencePiece vocab: '▁ab' scores higher than 'ab', so its merge ranks first, though it needs 'ab' made.
SPM_TOKENS = ['<unk>', '<s>', '<x>', 'a', 'b', 'ab', '\u2581', '\u2581ab', 'ba']
SPM_TYPES = [CONTROL, CONTROL, CONTROL, NORMAL, NORMAL, NORMAL, NORMAL, NORMAL, NORMAL]
SPM_SCORES = [0.0, 0.0, 0.0, -10.0, -11.0, -2.0, -12.0, -1.0, -3.0]
# A tiny byte-level vocab ('Ġ' is a space, 'Ċ' a newline); 'ba' has no merge, so only a whole-piece look-up finds it.
BPE_TOKENS = ['a', 'b', 'ab', 'ba', '\u0120', '\u0120ab', '\u010a', '<|x|>']
BPE_TYPES = [NORMAL] * 7 + [CONTROL]
BPE_MERGES = ['a b', '\u0120 ab']
USER_DEFINED = 4  # the type llama.cpp's converter gives the placeholders it writes for a model's added tokens
PADDED_TOKENS, PADDED_TYPES = [*BPE_TOKENS, '[PAD8]', '[PAD9]'], [*BPE_TYPES, USER_DEFINED, USER_DEFINED]
TAG = {'id': 8, 'content': '<t>', 'special': False, 'normalized': False, 'lstrip': False, 'rstrip': False,
       'single_word': False}  # as Qwen 2.5's tokenizer.json lists <tool_call> (id 151657)


def gguf(path: Path, model: str, tokens: list[str], types: list[int], scores=None, merges=None) -> Path:
    writer = GGUFWriter(str(path), arch='llama')
    writer.add_tokenizer_model(model)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    if scores is not None:
        writer.add_token_scores(scores)
    if merges is not None:
        writer.add_token_merges(merges)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def spec(tokens: int, merges: int, **options) -> dict:
    """What vocab_spec gives build_tokenizer for a vocab, with these counts and options."""
    return {'vocab_tokens': tokens, 'bpe_merges': merges, 'special_token_types': [CONTROL], 'split': [],
            'ignore_merges': False, 'nfc': False, 'prepend_space': False, 'rstrip': [], 'at': 'vocabs.tiny'} | options


class BuildTest(unittest.TestCase):
    def setUp(self):
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.tmp = Path(folder.name)

    def built(self, path: Path, options: dict) -> Tokenizer:
        build_tokenizer(path, self.tmp / 'tokenizer.json', options)
        return Tokenizer.from_file(str(self.tmp / 'tokenizer.json'))

    def ids(self, tokenizer: Tokenizer, text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False).ids

    def test_sentencepiece_merges_come_from_the_scores_higher_first_as_the_hugging_face_converter_makes_them(self):
        # 'ab' (-2) splits as a+b, '\u2581ab' (-1) as \u2581+ab, 'ba' (-3) as b+a; a control token is never a merge.
        self.assertEqual(merges_by_score(SPM_TOKENS, SPM_TYPES, SPM_SCORES),
                         ['\u2581 ab', 'a b', 'b a'])

    def test_phi_style_vocab_puts_a_space_before_each_text_and_its_special_tokens_take_the_whitespace_after_them(self):
        path = gguf(self.tmp / 'spm.gguf', 'llama', SPM_TOKENS, SPM_TYPES, scores=SPM_SCORES)
        tokenizer = self.built(path, spec(9, 3, prepend_space=True, rstrip=['<x>']))
        # 'ab' -> '\u2581ab' (7); '<x>' (2) takes '\n ', and what follows is another text: '\u2581ab' again.
        self.assertEqual(self.ids(tokenizer, 'ab<x>\n ab'), [7, 2, 7])
        without = self.built(path, spec(9, 3, prepend_space=True))  # '\n' is no token: <0x..> bytes are absent too
        self.assertEqual(self.ids(without, 'ab<x> ab'), [7, 2, 6, 7])

    def test_byte_level_vocab_is_split_by_its_pattern_and_llama_3_looks_a_whole_piece_up_first(self):
        path = gguf(self.tmp / 'bpe.gguf', 'gpt2', BPE_TOKENS, BPE_TYPES, merges=BPE_MERGES)
        merged = self.built(path, spec(8, 2, split=[SPLIT % '{1,3}']))
        # ' ab' is one piece: 'Ġab' (5); 'ba' has no merge: b, a; the newline is a piece of its own (6).
        self.assertEqual(self.ids(merged, 'ba ab\n<|x|>ab'), [1, 0, 5, 6, 7, 2])
        whole = self.built(path, spec(8, 2, split=[SPLIT % '{1,3}'], ignore_merges=True))
        self.assertEqual(self.ids(whole, 'ba ab\n<|x|>ab'), [3, 5, 6, 7, 2])

    def test_an_added_token_the_gguf_holds_only_as_a_placeholder_is_one_token_at_its_published_id(self):
        path = gguf(self.tmp / 'bpe.gguf', 'gpt2', PADDED_TOKENS, PADDED_TYPES, merges=BPE_MERGES)
        tokenizer = self.built(path, spec(10, 2, split=[SPLIT % ''], added_tokens=[TAG]))
        # '<t>' is id 8, where the GGUF has '[PAD8]'; the text around it is split and merged as before: ab (2).
        self.assertEqual((self.ids(tokenizer, '<t>'), self.ids(tokenizer, 'ab<t>ab')), ([8], [2, 8, 2]))
        added = tokenizer.get_added_tokens_decoder()
        self.assertEqual((added[8].content, added[8].special, added[8].normalized), ('<t>', False, False))
        self.assertEqual((sorted(added), tokenizer.get_vocab_size()), ([7, 8], 10))  # <|x|> and <t>; no new id

    def test_an_added_token_that_would_take_a_learned_tokens_id_or_repeat_one_is_refused(self):
        path = gguf(self.tmp / 'bpe.gguf', 'gpt2', PADDED_TOKENS, PADDED_TYPES, merges=BPE_MERGES)
        for token, why in [(TAG | {'id': 2}, "id 2 holds 'ab', not the placeholder [PAD2]"),
                           (TAG | {'id': 10}, "id 10 holds 'no token', not the placeholder [PAD10]"),
                           (TAG | {'content': 'ba'}, "it already holds 'ba' at id 3")]:
            with self.subTest(why), self.assertRaises(PrepareError) as caught:
                self.built(path, spec(10, 2, split=[SPLIT % ''], added_tokens=[token]))
            self.assertEqual(str(caught.exception), f"bpe.gguf: cannot give {token['content']!r} id {token['id']} "
                                                    f'(manifest vocabs.tiny.added_tokens): {why}; refusing it')

    def test_vocab_with_other_counts_than_the_manifest_is_refused_naming_where_they_are_pinned(self):
        path = gguf(self.tmp / 'bpe.gguf', 'gpt2', BPE_TOKENS, BPE_TYPES, merges=BPE_MERGES)
        with self.assertRaises(PrepareError) as caught:
            self.built(path, spec(9, 2, split=[SPLIT % '']))
        self.assertEqual(str(caught.exception), 'bpe.gguf: 8 tokens and 2 merges, expected 9 and 2 (manifest '
                                                'vocabs.tiny)')

    def test_vectors_file_ending_in_a_separator_holds_as_many_strings_as_id_lines(self):
        path = gguf(self.tmp / 'bpe.gguf', 'gpt2', BPE_TOKENS, BPE_TYPES, merges=BPE_MERGES)
        self.built(path, spec(8, 2, split=[SPLIT % '']))
        separator = MANIFEST['pypi_mirror']['vector_separator']
        (self.tmp / 'v.inp').write_text(f'ab\n{separator}\n ab\n{separator}\n', encoding='utf-8')
        (self.tmp / 'v.out').write_text('2\n5\n', encoding='utf-8')
        options = spec(8, 2, test_vectors=2, vector_separator=separator)
        self.assertEqual(check_vectors(self.tmp / 'tokenizer.json', self.tmp / 'v.inp', self.tmp / 'v.out', options), 2)

    def test_a_chat_format_writing_a_special_token_the_vocab_lacks_is_refused_not_estimated(self):
        path = gguf(self.tmp / 'bpe.gguf', 'gpt2', BPE_TOKENS, BPE_TYPES, merges=BPE_MERGES)
        self.built(path, spec(8, 2, split=[SPLIT % '']))
        form = {'prefix': '', 'suffix': '<|x|>assistant\n<think>\n\n</think>\n\n', 'close': '<|x|>\n',
                'no_system': None, 'open': {role: f'<|x|>{role}\n' for role in ('system', 'user', 'assistant')}}
        check_markers(self.tmp / 'tokenizer.json', {'format': form | {'suffix': '<|x|>assistant\n'}}, 'tiny', 'v.gguf')
        with self.assertRaises(PrepareError) as caught:
            check_markers(self.tmp / 'tokenizer.json', {'format': form}, 'qwen-3', 'dir/v.gguf')
        self.assertEqual(str(caught.exception), 'counter qwen-3: its chat format writes </think>, which v.gguf holds '
                                                'as no special token; refusing the counter rather than estimating its '
                                                'counts')


if __name__ == '__main__':
    unittest.main()
