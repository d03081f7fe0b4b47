"""Tests for prepared_folder.py: each test is named after the failure it pins.

    .venv/bin/python -m unittest -v test_prepared_folder.py   (a few seconds; everything happens in temp folders)

The folders checked here are written by hand the way the contract describes, not by prepare.py; replace is
driven with small fill functions. test_prepare_swap.py fails or interrupts every step of whole prepare.py runs;
here are what that loop cannot reach: a swap whose undo fails too, runs killed outright, parent folders a run
made, and the held signals themselves.
"""
import json
import os
from pathlib import Path
import resource
import shutil
import signal
import subprocess
import sys
import unittest
from unittest import mock

from common import LabError, python_command
from test_support_fixtures import HERE, MANIFEST as REAL_MANIFEST, TempFolderTest, sha256
from prepared_folder import (PREPARED, PREPARED_ENV, PREPARED_JSON, check_prepared, read_manifest, recover_abandoned,
                             replace_folder, signals_held)

HUB_FILES = {'tokenizer.json': b'{"version": "1.0"}\n', 'chat_template.jinja': b'{{ bos_token }}\n'}
PYPI_FILES = {'tokenizer.json': b'{"built": true}\n', 'vocab-vectors.inp': b'ab', 'vocab-vectors.out': b'7\n'}
MANIFEST_SHA = 'f' * 64  # check_prepared compares it with the record; what it hashes does not matter here
# what read_manifest says of a manifest that is no object: the keys it reads at the top level
NOT_A_MANIFEST = ("must be an object with the fields ['publisher_model', 'revision', 'chat_format', 'hub_files', "
                  "'counters', 'vocabs', 'pypi_mirror'], got []")


def pin(data: bytes) -> dict:
    return {'size': len(data), 'sha256': sha256(data)}


def pinning_manifest() -> dict:
    """The real manifest, its Hub files and PyPI files pinned to the small stand-ins above."""
    manifest = json.loads(json.dumps(REAL_MANIFEST))
    manifest['hub_files'] = {name: pin(data) for name, data in HUB_FILES.items()}
    mirror = manifest['pypi_mirror']
    mirror['built_tokenizer'] |= pin(PYPI_FILES['tokenizer.json'])
    mirror['members']['vectors_input'] |= pin(PYPI_FILES['vocab-vectors.inp'])
    mirror['members']['vectors_output'] |= pin(PYPI_FILES['vocab-vectors.out'])
    return manifest


def write_folder(folder: Path, files: dict[str, bytes], source: str, manifest: dict) -> Path:
    """A complete folder of that source, with the record the contract describes."""
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    record = {'source': source, 'publisher_model': manifest['publisher_model'], 'revision': manifest['revision'],
              'manifest_sha256': MANIFEST_SHA, 'files': {name: pin(data) for name, data in files.items()},
              'vectors_checked': manifest['pypi_mirror']['test_vectors'] if source == 'pypi' else 0}
    (folder / PREPARED_JSON).write_text(json.dumps(record), encoding='utf-8')
    return folder


class ReadManifestTest(TempFolderTest):
    def test_damaged_manifest_is_refused_in_one_line_naming_the_key(self):
        path = self.tmp / 'manifest.json'
        delete = object()
        damages = [  # (key path, new value or delete, what read_manifest says)
            (('pypi_mirror', 'members', 'vocab', 'sha256'), delete, 'missing field pypi_mirror.members.vocab.sha256'),
            (('pypi_mirror', 'members', 'vocab'), [],
             "field pypi_mirror.members.vocab must be an object with the fields ['path', 'size', 'sha256'], got []"),
            (('pypi_mirror', 'built_tokenizer'), delete, 'missing field pypi_mirror.built_tokenizer'),
            (('pypi_mirror', 'built_tokenizer', 'size'), '32169245',
             'field pypi_mirror.built_tokenizer.size must be an integer, got "32169245"'),
            (('pypi_mirror', 'special_token_types'), 3,
             'field pypi_mirror.special_token_types must be a list of integers, got 3'),
            (('pypi_mirror', 'special_token_types'), [1, '2'],
             'field pypi_mirror.special_token_types must be a list of integers, got [1, "2"]'),
            (('chat_format', 'count_scope'), delete, 'missing field chat_format.count_scope'),  # tokenizer.py's key
            (('pypi_mirror', 'built_tokenizer', 'file'), 'other.json',
             "pypi_mirror.built_tokenizer.file is 'other.json', but prepare.py builds tokenizer.json"),
            (('counters', 'llama-3.1', 'format', 'open', 'user'), delete,
             'missing field counters.llama-3.1.format.open.user'),
            (('counters', 'qwen-2.5', 'format', 'no_system'), 3,
             'field counters.qwen-2.5.format.no_system must be a string or null, got 3'),
            (('counters', 'phi-3.5', 'not_counted'), ['<x>', 1],
             'field counters.phi-3.5.not_counted must be a list of strings, got ["<x>", 1]'),
            (('counters', 'phi-3.5', 'vocab'), 'phi-4', 'counters.phi-3.5.vocab names no entry of vocabs'),
            (('counters', '../x'), {}, "counter name '../x' is not lowercase letters, digits, dots and dashes"),
            (('counters', 'gemma-4-e2b'), delete, 'missing field counters.gemma-4-e2b'),
            (('vocabs', 'qwen2', 'split'), [], None),  # none: not a byte-level vocab, still a manifest
            (('vocabs', 'qwen2', 'split'), 'x', 'field vocabs.qwen2.split must be a list of strings, got "x"'),
            # a vocab of the archive must pin its test vectors; a served one (test_vectors 0) pins its GGUF only
            (('vocabs', 'qwen2', 'members', 'vectors_input'), delete,
             'missing field vocabs.qwen2.members.vectors_input'),
            (('vocabs', 'smollm', 'members', 'vocab', 'sha256'), delete,
             'missing field vocabs.smollm.members.vocab.sha256'),
            (('vocabs', 'qwen2', 'nfc'), delete, 'missing field vocabs.qwen2.nfc'),
            (('vocabs', 'phi-3', 'added_tokens'), [[151657]],
             'field vocabs.phi-3.added_tokens must be a list of objects, got [[151657]]'),
            (('vocabs', 'qwen2', 'added_tokens', 1, 'id'), '151658',
             'field vocabs.qwen2.added_tokens.1.id must be an integer, got "151658"'),
            (('vocabs', 'qwen2', 'added_tokens', 0, 'special'), delete,
             'missing field vocabs.qwen2.added_tokens.0.special'),
        ]
        for keys, value, message in damages:
            with self.subTest(message):
                broken = json.loads(json.dumps(REAL_MANIFEST))
                node = broken
                for key in keys[:-1]:
                    node = node[key]
                if value is delete:
                    del node[keys[-1]]
                else:
                    node[keys[-1]] = value
                path.write_text(json.dumps(broken), encoding='utf-8')
                if message is None:  # still a manifest
                    self.assertEqual(read_manifest(path)[0], broken)
                    continue
                with self.assertRaises(LabError) as raised:
                    read_manifest(path)
                self.assertEqual(str(raised.exception), f'{path}: {message}; restore the manifest with git checkout')

    def test_manifest_that_is_not_json_an_object_or_there_is_refused_in_one_line(self):
        path = self.tmp / 'manifest.json'
        for text, problem in (('{"publisher_model": ', 'invalid JSON at line 1 column 21: Expecting value; restore the '
                                                       'manifest with git checkout'),
                              (b'\xff{}', 'the manifest is not UTF-8 text (byte 0); restore the manifest with git checkout'),
                              ('[]', f'{NOT_A_MANIFEST}; restore the manifest with git checkout'),
                              (None, 'cannot read the manifest: No such file or directory; restore the manifest with '
                                     'git checkout')):
            with self.subTest(problem):
                path.unlink(missing_ok=True)
                if text is not None:
                    path.write_bytes(text if isinstance(text, bytes) else text.encode())
                with self.assertRaises(LabError) as raised:
                    read_manifest(path)
                self.assertEqual(str(raised.exception), f'{path}: {problem}')

    def test_manifest_saved_with_a_byte_order_mark_is_read_and_hashed_as_saved(self):
        path = self.tmp / 'manifest.json'
        path.write_bytes(b'\xef\xbb\xbf' + (HERE / 'tokenizer-manifest.json').read_bytes())
        self.assertEqual(read_manifest(path), (REAL_MANIFEST, sha256(path.read_bytes())))


class CheckPreparedTest(TempFolderTest):
    def setUp(self):
        super().setUp()
        self.manifest = pinning_manifest()
        self.hub = write_folder(self.tmp / 'hub', HUB_FILES, 'hub', self.manifest)

    def check(self, folder: Path, source: str | None = None, manifest: dict | None = None, sha: str = MANIFEST_SHA):
        return check_prepared(folder, manifest or self.manifest, sha, source)

    def test_valid_folder_is_recognised_and_each_kind_of_damage_is_not(self):
        self.assertEqual(self.check(self.hub), ('hub', ''))
        self.assertEqual(self.check(self.hub, 'hub'), ('hub', ''))
        self.assertEqual(self.check(self.hub, 'pypi'),
                         (None, 'it was prepared from hub, and --source pypi was asked for'))
        self.assertEqual(self.check(self.hub, sha='0' * 64), (None, 'the manifest changed since it was prepared'))
        self.assertEqual(self.check(self.hub, manifest=self.manifest | {'revision': '0' * 40}),
                         (None, f"it was prepared for another revision ({self.manifest['revision']})"))
        (self.hub / 'chat_template.jinja').write_bytes(b'edited')
        self.assertEqual(self.check(self.hub),
                         (None, f"{self.hub / 'chat_template.jinja'} no longer matches its recorded size and sha256"))
        (self.hub / 'chat_template.jinja').unlink()
        self.assertEqual(self.check(self.hub), (None, f"{self.hub / 'chat_template.jinja'} is missing"))

    def test_damaged_record_is_not_valid_and_says_why(self):
        record_path = self.hub / PREPARED_JSON
        text = record_path.read_text(encoding='utf-8')
        record = json.loads(text)
        no_sha = {name: {'size': entry['size']} for name, entry in record['files'].items()}
        damaged = {
            'truncated JSON': (text[: len(text) // 2], f'{record_path}: invalid JSON at line 1 column '),
            'not UTF-8': (b'\xff\xfe{}', f"{record_path}: the prepared folder's record is not UTF-8 text (byte 0)"),
            'a key twice': (text[:-1] + ', "source": "pypi"}', f"{record_path}: key 'source' appears twice in one object"),
            'a list': ('[]', f'{record_path} is not a JSON object'),
            'a string': ('"hub"', f'{record_path} is not a JSON object'),
            'no source': (json.dumps(record | {'source': None}), f'{record_path} names no known source'),
            'files a list': (json.dumps(record | {'files': ['tokenizer.json']}),
                             'its record does not list exactly tokenizer.json, chat_template.jinja'),
            'no sha256': (json.dumps(record | {'files': no_sha}),
                          'its record gives no size and sha256 for tokenizer.json'),
            'entry a string': (json.dumps(record | {'files': dict.fromkeys(record['files'], 'ok')}),
                               'its record gives no size and sha256 for tokenizer.json'),
            'vectors unchecked': (json.dumps(record | {'source': 'pypi'}),
                                  'its record does not say that every test vector was checked'),
        }
        for kind, (content, reason) in damaged.items():
            with self.subTest(kind):
                record_path.write_bytes(content if isinstance(content, bytes) else content.encode())
                source, why = self.check(self.hub)
                self.assertIsNone(source)
                self.assertTrue(why.startswith(reason), why)
        record_path.unlink()
        self.assertEqual(self.check(self.hub), (None, f'{record_path} does not exist'))
        record_path.mkdir()
        self.assertEqual(self.check(self.hub), (None, f"{record_path}: cannot read the prepared folder's record: Is a "
                                                      'directory'))

    def test_folder_whose_files_match_their_record_but_not_the_manifest_is_not_valid(self):
        pypi = write_folder(self.tmp / 'pypi', PYPI_FILES, 'pypi', self.manifest)
        self.assertEqual(self.check(pypi), ('pypi', ''))
        for source, files, pinned_at in (('hub', HUB_FILES, 'hub_files.tokenizer.json'),
                                         ('pypi', PYPI_FILES, 'pypi_mirror.built_tokenizer')):
            with self.subTest(source):
                # still a tokenizer, and its record says so, but not the pinned bytes
                other = write_folder(self.tmp / f'other-{source}', files | {'tokenizer.json': b'{}'}, source,
                                     self.manifest)
                self.assertEqual(self.check(other), (None, f"{other / 'tokenizer.json'} does not match the "
                                                           f"manifest's sha256 ({pinned_at})"))


def prepared_folder_py(folder: Path, cwd: Path = HERE) -> subprocess.CompletedProcess:
    env = {**os.environ, PREPARED_ENV: str(folder)}
    return subprocess.run([sys.executable, 'prepared_folder.py'], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60)


class CommandTest(TempFolderTest):
    def test_the_prepared_folder_is_reported_complete_and_valid(self):
        source = json.loads((PREPARED / PREPARED_JSON).read_text(encoding='utf-8'))['source']
        result = prepared_folder_py(PREPARED)
        self.assertEqual((result.returncode, result.stderr), (0, ''))
        self.assertEqual(result.stdout, f'{PREPARED} is complete and valid (prepared from {source})\n')

    def test_an_empty_folder_is_refused_in_one_line_that_says_why(self):
        result = prepared_folder_py(self.tmp)
        self.assertEqual((result.returncode, result.stdout), (2, ''))
        self.assertEqual(result.stderr, f'prepared_folder.py: {self.tmp} is not a valid prepared counter: '
                                        f'{self.tmp / PREPARED_JSON} does not exist; '
                                        f'run `CONTEXT_LAB_PREPARED={self.tmp} {python_command()} prepare.py`\n')

    def test_a_changed_file_is_refused_naming_it(self):
        copy = self.tmp / 'prepared'
        shutil.copytree(PREPARED, copy)
        with open(copy / 'tokenizer.json', 'a', encoding='utf-8') as file:
            file.write(' ')
        result = prepared_folder_py(copy)
        self.assertEqual(result.returncode, 2)
        self.assertIn(f"{copy / 'tokenizer.json'} no longer matches its recorded size and sha256", result.stderr)
        self.assertEqual(result.stderr.count('\n'), 1)

    def test_a_symlink_loop_as_the_prepared_folder_is_one_line_not_a_traceback_at_import(self):
        loop = self.tmp / 'loop'
        loop.symlink_to('loop')
        result = subprocess.run([sys.executable, 'prepared_folder.py'], cwd=HERE, capture_output=True, text=True,
                                timeout=60, env={**os.environ, PREPARED_ENV: str(loop)})
        self.assertEqual((result.returncode, result.stdout, result.stderr.count('\n')), (2, '', 1), result.stderr)
        self.assertTrue(result.stderr.startswith(f'prepared_folder.py: {loop} is not a valid prepared counter: '),
                        result.stderr)

    def test_a_record_that_is_a_pipe_dev_zero_or_gigabytes_is_one_line_not_a_hang_or_memory_error(self):
        copy = self.tmp / 'prepared'
        copy.mkdir()
        for path in PREPARED.iterdir():
            (copy / path.name).symlink_to(path)
        record = copy / PREPARED_JSON
        huge = self.tmp / 'huge.json'
        with open(huge, 'wb') as file:
            file.truncate(3 * 10**9)  # sparse: it takes no disk
        for make, problem in ((os.mkfifo, 'must be a file, not a named pipe'),
                              (lambda path: path.symlink_to('/dev/zero'), 'must be a file, not a device'),
                              (lambda path: path.symlink_to(huge), 'is 3,000,000,000 bytes, more than the '
                                                                   '1,000,000,000 the lab reads')):
            with self.subTest(problem):
                record.unlink()
                make(record)
                result = subprocess.run([sys.executable, 'evaluate.py'], cwd=HERE, capture_output=True, text=True,
                                        env={**os.environ, PREPARED_ENV: str(copy)}, timeout=30,
                                        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30)))
                self.assertEqual((result.returncode, result.stdout), (2, ''))
                self.assertEqual(result.stderr, f"evaluate.py: {copy} is not a valid prepared counter: {record}: the "
                                                f"prepared folder's record {problem}; refusing to count: run "
                                                f'`CONTEXT_LAB_PREPARED={copy} {python_command()} prepare.py`\n')

    def test_a_damaged_manifest_is_one_line_not_a_traceback(self):
        lab = self.tmp / 'lab'  # the command reads the manifest beside itself
        lab.mkdir()
        for name in ('prepared_folder.py', 'common.py', 'lab_files.py', 'text.py', 'requirements.txt'):
            shutil.copy2(HERE / name, lab / name)
        (lab / 'tokenizer-manifest.json').write_text('[]', encoding='utf-8')
        result = prepared_folder_py(PREPARED, cwd=lab)
        self.assertEqual((result.returncode, result.stdout), (2, ''))
        self.assertEqual(result.stderr, f"prepared_folder.py: {lab / 'tokenizer-manifest.json'}: {NOT_A_MANIFEST}; "
                                        'restore the manifest with git checkout\n')


def fill_with(files: dict[str, bytes]):
    """A stage for replace: these files, written into workdir, and a record naming them."""
    def stage(workdir: Path):
        for name, data in files.items():
            (workdir / name).write_bytes(data)
        return {name: workdir / name for name in files}, {'files': sorted(files)}
    return stage


def contents(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir()}


class ReplaceTest(TempFolderTest):
    def setUp(self):
        super().setUp()
        self.target = self.tmp / 'prepared'
        self.said: list[str] = []

    def test_failed_swap_whose_undo_fails_too_says_where_the_old_folder_is_and_keeps_it(self):
        self.target.mkdir()
        (self.target / 'tokenizer.json').write_bytes(b'old')
        real_rename, calls = os.rename, []

        def rename(src, dst):
            calls.append((Path(src).name, Path(dst).name))
            if len(calls) >= 2:  # the rename into place, and the one putting the old folder back
                raise OSError(5, 'Input/output error')
            real_rename(src, dst)

        with mock.patch.object(os, 'rename', rename), self.assertRaises(LabError) as raised:
            replace_folder(self.target, fill_with({'tokenizer.json': b'new'}), self.said.append)
        self.assertEqual(calls, [('prepared', 'old'), ('new', 'prepared'), ('old', 'prepared')])
        (workdir,) = self.tmp.glob('.prepared.swap-*')
        self.assertEqual(str(raised.exception),
                         f'{self.target} could not be put back after a failed swap (Input/output error): the previous'
                         f" folder is now {workdir / 'old'}; move it back with mv")
        self.assertEqual(contents(workdir / 'old'), {'tokenizer.json': b'old'})  # kept, not removed

    def test_failed_fill_takes_back_the_parent_folders_it_made(self):
        def fail(workdir: Path):
            raise OSError(28, 'No space left on device')

        with self.assertRaises(OSError):
            replace_folder(self.tmp / 'a' / 'b' / 'prepared', fail, self.said.append)
        self.assertEqual(os.listdir(self.tmp), [])

    def test_file_where_the_folder_should_be_is_refused_and_kept(self):
        self.target.write_bytes(b'a file')
        with self.assertRaises(LabError) as raised:
            replace_folder(self.target, fill_with({}), self.said.append)
        self.assertEqual(str(raised.exception), f'{self.target} is not a folder')
        self.assertEqual(self.target.read_bytes(), b'a file')

    def test_folder_left_by_a_killed_run_is_removed_a_running_ones_kept_and_a_stranded_old_folder_put_back(self):
        dead = subprocess.Popen([sys.executable, '-c', 'pass'])
        dead.wait()
        abandoned, alive = self.tmp / f'.prepared.swap-{dead.pid}-abc', self.tmp / f'.prepared.swap-{os.getpid()}-def'
        (abandoned / 'old').mkdir(parents=True)  # killed between its two renames: the target is missing
        (abandoned / 'old' / 'tokenizer.json').write_bytes(b'old')
        (alive / 'new').mkdir(parents=True)
        recover_abandoned(self.target, self.said.append)
        self.assertEqual(sorted(os.listdir(self.tmp)), sorted([alive.name, 'prepared']))
        self.assertEqual(contents(self.target), {'tokenizer.json': b'old'})
        self.assertEqual(self.said, [
            f"put {self.target} back from {abandoned / 'old'}, where a run stopped between two renames left it",
            f'removed {abandoned.name}, left in {self.tmp} by an earlier run that was stopped'])

    def test_a_folder_whose_pid_no_process_can_have_is_removed_instead_of_an_overflow_traceback(self):
        for pid in ('99999999999999999999', str(2**40), 'x'):
            with self.subTest(pid):
                (self.tmp / f'.prepared.swap-{pid}-abc').mkdir()
                recover_abandoned(self.target, self.said.append)
                self.assertEqual(os.listdir(self.tmp), [])

    def test_signal_during_the_held_block_is_not_acted_on_and_the_handler_comes_back(self):
        def not_held(signum, frame):  # what SIGTERM would do unheld, without ending the test run
            raise AssertionError('SIGTERM was acted on inside the held block')

        for signum, handler in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, not_held)):
            self.addCleanup(signal.signal, signum, signal.signal(signum, handler))
        with signals_held():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
        self.assertIs(signal.getsignal(signal.SIGINT), signal.default_int_handler)
        self.assertIs(signal.getsignal(signal.SIGTERM), not_held)
        with self.assertRaises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)


if __name__ == '__main__':
    unittest.main()
