"""Tests for gguf_counter.py and prepare.py --counter-from: each test is named after the failure it pins.

Run: .venv/bin/python -m unittest -v test_gguf_counter.py   (the vocabulary tests need prepared-qwen-2.5/)

The GGUFs here are small files written by the gguf package, holding a template and tokenizer fields only; the
vocabulary tests take the prepared qwen-2.5 tokenizer as the GGUF's tokens and change one thing at a time. The
SmolLM2 tests prepare its counter from the real GGUF into a temp folder and hold it to the template in that GGUF's
metadata, rendered by jinja2 with a null content as empty text, as llama.cpp's engine renders it; they run where
`real_server.py build` has assembled the GGUF and are skipped otherwise, naming that command.
"""
import json
from pathlib import Path
import shutil
import subprocess
import sys
import tempfile
import unittest

from gguf import GGUFWriter
from tokenizers import Tokenizer

from common import HERE, LabError
import gguf_counter
from prepared_folder import PREPARED_ENV, TEMPLATE_FILE, TOKENIZER_JSON, counter_folder
import real_server
from test_support_fixtures import MANIFEST, rule_requests, sha256
from test_support_oracle import compiled
from tokenizer import TokenCounter

QWEN = MANIFEST['counters']['qwen-2.5']
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def write_gguf(path: Path, template: str, model: str = 'gpt2', pre: str = 'qwen2', add_bos: bool = False,
               vocabulary: dict | None = None) -> Path:
    """A GGUF of tokenizer fields only: three tokens, or `vocabulary`'s tokens, types and merges."""
    vocabulary = vocabulary or {'ggml.tokens': ['a', 'b', 'ab'], 'ggml.token_type': [1, 1, 1], 'ggml.merges': ['a b']}
    writer = GGUFWriter(str(path), arch='qwen2')
    writer.add_tokenizer_model(model)
    writer.add_tokenizer_pre(pre)
    writer.add_add_bos_token(add_bos)
    writer.add_token_list(vocabulary['ggml.tokens'])
    writer.add_token_types(vocabulary['ggml.token_type'])
    writer.add_token_merges(vocabulary['ggml.merges'])
    writer.add_chat_template(template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


class RecogniseTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = Path(self.enterContext(tempfile.TemporaryDirectory()))
        qwen = counter_folder('qwen-2.5') / TEMPLATE_FILE
        self.qwen_template = qwen.read_text(encoding='utf-8') if qwen.is_file() else None

    def recognise(self, path: Path) -> str:
        return gguf_counter.counter_for(path, gguf_counter.read_gguf(path), MANIFEST)

    def test_a_template_no_counter_reproduces_is_refused_in_one_line_with_exit_2(self) -> None:
        path = write_gguf(self.tmp / 'chatml.gguf', CHATML)
        result = subprocess.run([sys.executable, 'prepare.py', '--counter-from', str(path)], cwd=HERE, text=True,
                                capture_output=True, env={PREPARED_ENV: str(self.tmp / 'prepared'), 'PATH': ''})
        self.assertEqual((result.returncode, result.stdout), (2, ''))
        self.assertEqual(result.stderr.splitlines(), [
            f'prepare.py: error: {path}: its chat template (sha256 1eca4a136b0ee4b7ce51bf09c5366f71d4345b9358f4dc1a'
            f'6fc161912975b450) is none of the official templates the lab\'s counters reproduce (llama-3.1, '
            "llama-3.2, llama-3.3, qwen-2.5, phi-3.5, smollm2-135m); refusing to count it"])
        self.assertFalse((self.tmp / 'prepared').exists())

    def test_a_counter_built_from_its_gguf_is_not_prepared_without_it_and_the_refusal_says_how(self) -> None:
        result = subprocess.run([sys.executable, 'prepare.py', '--counter', 'smollm2-135m'], cwd=HERE, text=True,
                                capture_output=True, env={PREPARED_ENV: str(self.tmp / 'prepared'), 'PATH': ''})
        self.assertEqual((result.returncode, result.stdout), (2, ''))
        self.assertEqual(result.stderr.splitlines(), [
            'prepare.py: error: counter smollm2-135m is built only from the GGUF it counts, '
            'smollm2-135m-instruct.gguf: run prepare.py --counter-from FILE.gguf'])
        self.assertFalse((self.tmp / 'prepared-smollm2-135m').exists())

    def test_the_official_qwen_template_is_recognised_as_the_qwen_counter(self) -> None:
        if self.qwen_template is None:
            self.skipTest('qwen-2.5 is not prepared: run `.venv/bin/python prepare.py --counter qwen-2.5`')
        self.assertEqual(self.recognise(write_gguf(self.tmp / 'qwen.gguf', self.qwen_template)), 'qwen-2.5')

    def test_the_qwen_template_over_another_tokenizer_or_with_a_bos_is_refused_naming_which(self) -> None:
        if self.qwen_template is None:
            self.skipTest('qwen-2.5 is not prepared: run `.venv/bin/python prepare.py --counter qwen-2.5`')
        with self.assertRaisesRegex(LabError, r'its tokenizer is gpt2 with pre-tokenizer smollm, not the byte-level '
                                    r'BPE qwen2 of counter qwen-2.5'):
            self.recognise(write_gguf(self.tmp / 'smollm.gguf', self.qwen_template, pre='smollm'))
        with self.assertRaisesRegex(LabError, r'llama.cpp adds a BOS token to its prompts, which counter qwen-2.5'):
            self.recognise(write_gguf(self.tmp / 'bos.gguf', self.qwen_template, add_bos=True))


class VocabularyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        path = counter_folder('qwen-2.5') / TOKENIZER_JSON
        if not path.is_file():
            raise unittest.SkipTest('qwen-2.5 is not prepared: run `.venv/bin/python prepare.py --counter qwen-2.5`')
        cls.path, tokenizer = path, Tokenizer.from_file(str(path))
        texts = {index: text for text, index in tokenizer.get_vocab(with_added_tokens=True).items()}
        added = tokenizer.get_added_tokens_decoder()
        cls.fields = {'ggml.tokens': [texts[index] for index in range(len(texts))],
                      'ggml.token_type': [(3 if added[i].special else 4) if i in added else 1
                                          for i in range(len(texts))],
                      'ggml.merges': [' '.join(pair) for pair in json.loads(tokenizer.model.__getstate__())['merges']]}

    def difference(self, **changed) -> str:
        fields = {key: list(value) for key, value in self.fields.items()}
        for key, (index, value) in changed.items():
            fields[f"ggml.{key}"][index] = value
        return gguf_counter.vocab_difference(fields, self.path, QWEN['not_counted'])

    def test_counter_from_prepares_the_recognised_counter_and_prints_the_gguf_pinned_in_its_profile(self) -> None:
        tmp = Path(self.enterContext(tempfile.TemporaryDirectory()))
        shutil.copytree(counter_folder('qwen-2.5'), tmp / 'prepared-qwen-2.5')  # valid: made for this manifest
        path = write_gguf(tmp / 'served.gguf', (counter_folder('qwen-2.5') / TEMPLATE_FILE).read_text('utf-8'),
                          vocabulary=self.fields)
        result = subprocess.run([sys.executable, 'prepare.py', '--counter-from', str(path)], cwd=HERE, text=True,
                                capture_output=True, env={PREPARED_ENV: str(tmp / 'prepared'), 'PATH': ''})
        self.assertEqual((result.returncode, result.stderr), (0, ''))
        self.assertIn('prepared-qwen-2.5 is already complete and valid (qwen-2.5', result.stdout)
        profile = json.loads(result.stdout[result.stdout.index('{'):])
        shown = ('gguf', 'gguf_size', 'gguf_sha256', 'counter', 'template_sha256')
        self.assertEqual({key: profile[key] for key in shown},
                         {'gguf': 'served.gguf', 'gguf_size': path.stat().st_size,
                          'gguf_sha256': sha256(path.read_bytes()), 'counter': 'qwen-2.5',
                          'template_sha256': QWEN['template']['sha256']})

    def test_the_prepared_vocabulary_itself_is_reproduced(self) -> None:
        self.assertEqual(self.difference(), '')

    def test_a_served_special_token_where_the_counter_has_a_placeholder_passes_only_if_the_counter_refuses_it(self):
        self.assertEqual(self.difference(tokens=(151659, '<|fim_prefix|>'), token_type=(151659, 3)), '')
        self.assertEqual(self.difference(tokens=(151659, '<|not_refused|>'), token_type=(151659, 3)),
                         "token 151659 is '<|not_refused|>' of type 3, the counter has '[PAD151659]' there")

    def test_a_tool_call_tag_served_as_a_special_token_is_a_difference(self) -> None:
        self.assertEqual(self.difference(token_type=(151657, 3)),
                         "token 151657 is '<tool_call>' of type 3, the counter has '<tool_call>' there")

    def test_one_merge_out_of_order_is_a_difference(self) -> None:
        merges = self.fields['ggml.merges']
        self.assertEqual(self.difference(merges=(0, merges[1])),
                         f"its {len(merges)} merges are not the counter's {len(merges)}")



SMOLLM2_GGUF = real_server.SERVER / real_server.MODELS['smollm2-135m-instruct']['file']


@unittest.skipIf(why := real_server.check_server(), f'the SmolLM2 GGUF is not assembled ({why}): run '
                 f'`{real_server.BUILD_COMMAND}` (12 to 17 minutes, once per machine)')
class ServedSmolLM2Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = Path(tempfile.mkdtemp())
        cls.prepared = subprocess.run([sys.executable, 'prepare.py', '--counter-from', str(SMOLLM2_GGUF)], cwd=HERE,
                                      text=True, capture_output=True,
                                      env={PREPARED_ENV: str(cls.tmp / 'prepared'), 'PATH': ''})
        folder = cls.tmp / 'prepared-smollm2-135m'
        cls.count = TokenCounter(folder, 'smollm2-135m') if cls.prepared.returncode == 0 else None
        cls.template = compiled(gguf_counter.read_gguf(SMOLLM2_GGUF)['chat_template'])

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.tmp)

    def official(self, messages: list[dict]) -> str:
        """The GGUF's own template, a null content rendered as '' (llama.cpp's engine; jinja2 would raise)."""
        return self.template.render(messages=[{**message, 'content': message['content'] or ''}
                                              for message in messages], add_generation_prompt=True)

    def test_counter_from_prepares_the_smollm2_counter_from_its_gguf_and_pins_the_gguf(self) -> None:
        self.assertEqual(self.prepared.returncode, 0, self.prepared.stderr)
        profile = json.loads(self.prepared.stdout[self.prepared.stdout.index('{'):])
        self.assertEqual({key: profile[key] for key in ('gguf', 'gguf_size', 'gguf_sha256', 'counter')},
                         {'gguf': 'smollm2-135m-instruct.gguf', 'gguf_size': 98362432, 'counter': 'smollm2-135m',
                          'gguf_sha256': 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53'})

    def test_every_rule_request_of_both_case_sets_renders_and_counts_as_the_ggufs_own_template(self) -> None:
        for case_set in ('cases.json', 'agent-cases.json'):
            with self.subTest(case_set):
                for messages in rule_requests(self.count, case_set):
                    official = self.official(messages)
                    self.assertEqual(self.count.prompt(messages), official)
                    self.assertEqual(self.count(messages), len(self.count.encode(official)))

    def test_digits_are_split_apart_before_gpt2s_split_as_llama_cpps_smollm_pre_tokenizer_does(self) -> None:
        # GPT-2's split alone cuts 'x  12' as 'x', ' ', ' 12' (\s+(?!\S) leaves the last space to the digits), so
        # 5 tokens; digits cut off first leave '  ' whole: 'x', '  ', '1', '2', the ids llama.cpp's server gave
        # (/tokenize, build 11434, 2026-12-04).
        self.assertEqual(self.count.encode('x  12'), [104, 256, 33, 34])


if __name__ == '__main__':
    unittest.main()
